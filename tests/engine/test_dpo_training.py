"""DPO on 2 CPU processes, each reference choice: FSDP2 full fine-tunes with the `model`
and `precomputed` references, a LoRA with the `adapter` reference, on a set where the
chosen completion is learnable.

One launch of eight jobs (engine_jobs.torchrun_jobs): `model` straight and resumed (in a
new directory) from its step-MIDDLE checkpoint, `precomputed` straight, `adapter`
straight and resumed, `model` under FSDP1 with full activation checkpointing, and
axolotl's DPO example and TRL's DPO launch script as `fsdpspec import axolotl|trainer`
write them, with the tiny model and a local preference file set by `--set` (issue 46),
for 2 steps.
`precomputed` also runs through `fsdpspec run` as a user runs it: stopped at step MIDDLE
(`--set train.max_steps=MIDDLE`), then resumed in place, where it reads the reference
log-probs its first start wrote.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from engine_jobs import BASE, merged, metrics, ok, torchrun_jobs, write_spec
from preference_assets import preference_jsonl

from conftest import ROOT, run_cli
from fsdpspec.cli.main import cli
from fsdpspec.runfiles.resolved import write_resolved_spec
from fsdpspec.validate import check_file

pytestmark = pytest.mark.slow

STEPS, MIDDLE = 10, 5
METRICS = ("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies",
           "rewards/margins", "logps/chosen", "logps/rejected")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from chat_assets import chat_tokenizer, tiny_llama
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("dpo-inputs")
    tokenizer = chat_tokenizer(root / "tokenizer")
    tiny_llama(root / "model", len(AutoTokenizer.from_pretrained(tokenizer)),
               hidden_size=64, num_hidden_layers=2)
    preference_jsonl(root / "pairs" / "train.jsonl", 64)
    preference_jsonl(root / "pairs" / "test.jsonl", 8, seed=1)
    chats = preference_jsonl(root / "chat-pairs.jsonl", 8, chat=True)
    # axolotl's example names the prompt's messages `conversation`
    chats.write_text("".join(line.replace('{"prompt":', '{"conversation":', 1) + "\n"
                             for line in chats.read_text().splitlines()))
    return root


AXOLOTL_DPO = ROOT / "tests" / "convert" / "configs" / "axolotl" / "qwen2-dpo.yaml"
TRL_DPO = ROOT / "tests" / "convert" / "trl_dpo" / "accelerate-multi-gpu.sh"


def _imported(kind: str, source: Path, data: Path, inputs: Path, run_dir: Path) -> Path:
    """``source`` imported as `fsdpspec import KIND` writes it, then the tiny model, the
    local preference ``data`` and 2 CPU processes set as a user sets them (`--set`)."""
    spec = run_dir.with_suffix(".yaml")
    imported = CliRunner().invoke(cli, ["import", kind, str(source), "-o", str(spec)])
    assert imported.exit_code == 0, imported.output
    report = check_file(spec, [
        "resources.gpus_per_node=2", "resources.accelerator=cpu", "model.preset=null",
        f"model.hf_config={inputs / 'model'}", f"model.weights={inputs / 'model'}",
        "model.attention=sdpa", f"data.path={data}",
        f"data.tokenizer={inputs / 'tokenizer'}", "data.seq_len=32",
        "data.global_batch_size=4", "fsdp.mixed_precision=fp32", "train.max_steps=2"])
    assert report.spec is not None and not report.has_errors, report.diagnostics
    return write_resolved_spec(report.spec, run_dir)


def _job(inputs: Path, reference: str) -> dict[str, Any]:
    job: dict[str, Any] = {
        "model": {"preset": None, "hf_config": str(inputs / "model"),
                  "weights": str(inputs / "model")},
        "data": {"source": "dataset", "path": str(inputs / "pairs"), "format": "preference",
                 "tokenizer": str(inputs / "tokenizer"), "eval": {"split": "test"},
                 "seq_len": 32, "micro_batch_size": 2, "global_batch_size": 8},
        "optimizer": {"lr": 1e-3},
        "train": {"max_steps": STEPS, "eval_interval_steps": MIDDLE, "objective": "dpo",
                  "dpo": {"beta": 0.1, "reference": reference}},
        "checkpoint": {"interval_steps": MIDDLE, "keep_last": 0,
                       "final": {"dtype": "float32"}},
    }
    if reference == "adapter":
        job["peft"] = {"r": 8, "alpha": 16}
        job["optimizer"] = {"lr": 1e-2}
    return job


def _resumed(job: dict[str, Any], straight: Path) -> dict[str, Any]:
    checkpoint = straight / "checkpoints" / f"step-{MIDDLE:08d}"
    return merged(job, {"checkpoint": {"resume": str(checkpoint)}})


def _steps(run_dir: Path) -> dict[int, dict[str, float]]:
    return {m["step"]: {k: m[k] for k in METRICS} for m in metrics(run_dir) if "loss" in m}


def _evals(run_dir: Path) -> dict[int, dict[str, float]]:
    return {m["step"]: m for m in metrics(run_dir) if "eval_loss" in m}


@pytest.fixture(scope="module")
def runs(inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dpo-runs")
    env = {"HF_DATASETS_CACHE": str(root / "datasets-cache")}  # datasets' cache stays in the test
    jobs = {name: _job(inputs, name) for name in ("model", "precomputed", "adapter")}
    jobs["model-resumed"] = _resumed(jobs["model"], root / "model")
    jobs["adapter-resumed"] = _resumed(jobs["adapter"], root / "adapter")
    jobs["fsdp1-checkpointed"] = merged(jobs["model"], {"fsdp": {
        "version": 1, "use_orig_params": True, "activation_checkpointing": "full"}})
    order = ("model", "model-resumed", "precomputed", "adapter", "adapter-resumed",
             "fsdp1-checkpointed")
    specs = [write_spec(root / name, jobs[name]) for name in order]
    imported = [_imported("axolotl", AXOLOTL_DPO, inputs / "chat-pairs.jsonl", inputs,
                          root / "axolotl-dpo"),
                _imported("trainer", TRL_DPO, inputs / "pairs", inputs, root / "trl-dpo")]
    results = torchrun_jobs([*specs, *imported], env=env)
    for result in results:
        ok(result)
    # `precomputed` through `fsdpspec run`, stopped at MIDDLE and resumed in place.
    spec = root / "precomputed-cli.yaml"
    written = merged(BASE, merged(jobs["precomputed"], {
        "metadata": {"name": "dpo-precomputed"},
        "checkpoint": {"dir": str(root / "precomputed-cli")}}))
    spec.write_text(json.dumps(written))  # JSON is YAML
    first = ok(run_cli("run", str(spec), "--set", f"train.max_steps={MIDDLE}",
                       timeout=600, env=env))
    cache = next((root / "precomputed-cli" / "reference-logps").glob("*.pt"))
    written_at = cache.stat().st_mtime_ns
    again = ok(run_cli("run", str(spec), timeout=600, env=env))
    assert "reference log-probs: read from" in again.stdout, again.stdout
    assert "written to" in first.stdout and "written to" not in again.stdout
    assert cache.stat().st_mtime_ns == written_at  # reused, never recomputed
    return {**{name: root / name for name in order},
            "precomputed-cli": root / "precomputed-cli", "axolotl-dpo": root / "axolotl-dpo",
            "trl-dpo": root / "trl-dpo"}


def test_imported_axolotl_dpo_example_trains(runs: dict[str, Path]) -> None:
    steps = _steps(runs["axolotl-dpo"])
    assert sorted(steps) == [1, 2]
    assert steps[1]["loss"] == pytest.approx(0.6931, abs=1e-4)  # the policy is its reference
    assert steps[2]["loss"] < steps[1]["loss"]


def test_imported_trl_dpo_launch_trains(runs: dict[str, Path]) -> None:
    """TRL's documented DPO launch, imported: FSDP1 (accelerate's default), activation
    checkpointing, TRL's frozen-copy reference, at the script's learning rate 5e-7."""
    steps = _steps(runs["trl-dpo"])
    assert sorted(steps) == [1, 2]
    assert steps[1]["loss"] == pytest.approx(0.6931, abs=1e-4)  # the policy is its reference
    assert steps[2]["loss"] != steps[1]["loss"]
    assert all(math.isfinite(value) for step in steps.values() for value in step.values())


@pytest.mark.parametrize("reference", ["model", "precomputed", "adapter"])
def test_reward_accuracy_rises_on_a_learnable_set(runs: dict[str, Path],
                                                  reference: str) -> None:
    steps, evals = _steps(runs[reference]), _evals(runs[reference])
    assert sorted(steps) == list(range(1, STEPS + 1))
    assert steps[1]["loss"] == pytest.approx(0.6931, abs=1e-4)  # the policy is its reference
    assert steps[STEPS]["rewards/accuracies"] > 0.5
    assert steps[STEPS]["loss"] < steps[1]["loss"]
    assert evals[STEPS]["eval_rewards/accuracies"] > 0.5
    assert evals[STEPS]["eval_loss"] < evals[MIDDLE]["eval_loss"] < 0.6931


@pytest.mark.parametrize("reference", ["model", "adapter"])
def test_resume_is_bit_identical(runs: dict[str, Path], reference: str) -> None:
    straight, resumed = _steps(runs[reference]), _steps(runs[f"{reference}-resumed"])
    assert resumed == {s: v for s, v in straight.items() if s > MIDDLE}
    assert _evals(runs[f"{reference}-resumed"])[STEPS] == _evals(runs[reference])[STEPS]


def test_precomputed_resumes_in_place_bit_identically(runs: dict[str, Path]) -> None:
    assert _steps(runs["precomputed-cli"]) == _steps(runs["precomputed"])
    assert _evals(runs["precomputed-cli"])[STEPS] == _evals(runs["precomputed"])[STEPS]


def test_precomputed_and_model_references_give_the_same_losses(runs: dict[str, Path]) -> None:
    model, precomputed = _steps(runs["model"]), _steps(runs["precomputed"])
    for step in range(1, STEPS + 1):
        for name in METRICS:
            assert precomputed[step][name] == pytest.approx(model[step][name], abs=1e-5), (
                step, name)


def test_fsdp1_with_activation_checkpointing_trains_as_fsdp2(runs: dict[str, Path]) -> None:
    fsdp1, fsdp2 = _steps(runs["fsdp1-checkpointed"]), _steps(runs["model"])
    for step in range(1, STEPS + 1):
        for name in METRICS:
            assert fsdp1[step][name] == pytest.approx(fsdp2[step][name], abs=1e-5), (step, name)


@pytest.mark.parametrize("reference", ["model", "precomputed"])
def test_full_export_loads(runs: dict[str, Path], inputs: Path, reference: str) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    final = runs[reference] / "final"
    model = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)
    exported = load_file(str(final / "model.safetensors"))
    name = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(model.state_dict()[name], exported[name])
    start = load_file(str(inputs / "model" / "model.safetensors"))
    assert not torch.equal(start[name], exported[name])  # trained


def test_adapter_export_loads_with_peft(runs: dict[str, Path], inputs: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(inputs / "model", dtype=torch.float32)
    ids = torch.tensor([[10, 11, 12, 13]])
    with torch.no_grad():
        before = base(ids).logits
        adapted = PeftModel.from_pretrained(base, runs["adapter"] / "final" / "adapter")
        after = adapted(ids).logits
    assert not torch.allclose(before, after)  # the trained adapter changes the model
