"""LoRA on a Mixture of Experts' experts as peft does it (`peft.target_parameters`,
issue 45), end to end on 2 CPU processes for every MoE family the engine trains (tiny
Mixtral, Qwen3-MoE, OLMoE, gpt-oss, each saved with save_pretrained): the stacked expert
tensors beside attention targets, under FSDP2. Per family one straight run of 5 steps
(checkpointed at step 3) and one resumed from its step-3 checkpoint, all eight in one
launch, then in that launch the run's own logits (engine_jobs.train_then_probe) against
the adapter loaded by ``PeftModel.from_pretrained`` and the merged export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from engine_jobs import metrics, ok, train_then_probe, write_spec  # noqa: E402

pytestmark = pytest.mark.slow

FAMILIES = {"mixtral": "tiny-mixtral", "qwen3_moe": "tiny-qwen3-moe", "olmoe": "tiny-olmoe",
            "gpt_oss": "tiny-gpt-oss"}
STEPS, MIDDLE = 5, 3
PEFT = {"r": 4, "alpha": 8, "merged": True, "target_modules": ["q_proj", "v_proj"],
        "target_parameters": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]}


def _job(model: Path) -> dict[str, Any]:
    return {"model": {"preset": None, "hf_config": str(model), "weights": str(model),
                      "attention": "eager"},
            "optimizer": {"lr": 1e-2},
            "train": {"max_steps": STEPS},
            "checkpoint": {"interval_steps": MIDDLE, "keep_last": 0},
            "peft": PEFT}


def _save(preset: str, directory: Path) -> Path:
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    from fsdpspec.catalog.presets import preset_config

    torch.manual_seed(0)
    config = AutoConfig.for_model(**preset_config(preset))
    model = AutoModelForCausalLM.from_config(config)
    # transformers 5 names (save_pretrained writes Mixtral's experts back in 4's layout).
    config.save_pretrained(directory)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """By family: (model dir, straight run, resumed run, the straight run's probe)."""
    root = tmp_path_factory.mktemp("lora-experts")
    models = {f: _save(p, root / "models" / f) for f, p in FAMILIES.items()}
    jobs, runs = {}, []
    for family, model in models.items():
        job = _job(model)
        step = root / family / "checkpoints" / f"step-{MIDDLE:08d}"
        jobs[family] = job
        jobs[f"{family}-resumed"] = {**job, "checkpoint": {**job["checkpoint"],
                                                           "resume": str(step)}}
        runs.append((root / family, job))
    specs = [write_spec(root / name, job) for name, job in jobs.items()]
    results, probes = train_then_probe(specs, runs)
    for result in results:
        ok(result)
    return {f: (models[f], root / f, root / f"{f}-resumed", probe)
            for f, probe in zip(FAMILIES, probes, strict=True)}


def _losses(run_dir: Path) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in metrics(run_dir) if "loss" in m}


@pytest.mark.parametrize("family", FAMILIES)
def test_experts_train_and_resume_bit_identically(family: str, trained: dict) -> None:
    from safetensors.torch import load_file

    _, straight, resumed, _ = trained[family]
    losses = _losses(straight)
    print(f"{family} LoRA on experts: loss {losses[1]:.4f} -> {losses[STEPS]:.4f}")
    assert sorted(losses) == list(range(1, STEPS + 1)) and losses[STEPS] < losses[1]
    assert _losses(resumed) == {s: v for s, v in losses.items() if s > MIDDLE}
    a = load_file(straight / "final" / "adapter" / "adapter_model.safetensors")
    b = load_file(resumed / "final" / "adapter" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # q_proj, v_proj and the two expert tensors: A and B each, in both layers.
    assert len(a) == 2 * 4 * 2 and any(".mlp.experts." in k for k in a)


@pytest.mark.parametrize("family", FAMILIES)
def test_adapter_loads_in_peft_with_the_runs_logits(family: str, trained: dict) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model, straight, _, probe = trained[family]
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, straight / "final" / "adapter").eval()
    with torch.no_grad():
        logits = adapted(probe["input_ids"]).logits
        plain = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)(
            probe["input_ids"]).logits
    run = (logits - probe["checkpoint"]).abs().max().item()
    merged = (logits - probe["transformers"]).abs().max().item()
    print(f"{family}: peft vs the run {run:.2e}, vs the merged export {merged:.2e}")
    assert not torch.allclose(logits, plain)  # trained
    assert run <= 1e-5 and merged <= 1e-5
