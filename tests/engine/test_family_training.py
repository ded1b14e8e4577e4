"""Every newer family trains with the real engine: torchrun, 2 CPU processes, gloo, a
tiny preset; FSDP2 for all, FSDP1 for one dense family and one Mixture-of-Experts. A
Mixture-of-Experts model's load-balancing loss is part of the loss the engine optimises.
The Mixtures of Experts planned from the model transformers builds (DeepSeek-V3, GLM-4.5,
Llama 4: tests/models/tiny-*) train too, and those whose config names an experts module
train under expert parallelism 2 exactly as without it.
The jobs train one after another in one launch (engine_jobs.torchrun_jobs): a tiny job's
cost is its processes' imports."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from engine_jobs import torchrun_jobs  # noqa: E402

from conftest import ROOT  # noqa: E402
from fsdpspec.catalog.presets import preset_config  # noqa: E402
from fsdpspec.runfiles.resolved import write_resolved_spec  # noqa: E402
from fsdpspec.spec.v1 import JobSpec  # noqa: E402

MODELS = ROOT / "tests" / "models"
# transformers builds gpt-oss with eager attention only.
ATTENTION = {"tiny-gpt-oss": "eager"}


def job(preset: str, version: int, precision: str = "fp32") -> dict:
    return {
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": preset},
        "resources": {"gpus_per_node": 2},
        "model": {"preset": preset, "attention": ATTENTION.get(preset, "sdpa")},
        "fsdp": {"version": version, "mixed_precision": precision},
        "data": {"source": "corpus", "seq_len": 32, "micro_batch_size": 1,
                 "global_batch_size": 2},
        "optimizer": {"lr": 1e-3, "scheduler": {"name": "constant"}},
        "train": {"max_steps": 4},
        "checkpoint": {"interval_steps": 0, "final": {"enabled": False}},
        "logging": {"interval_steps": 1},
    }


def losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if '"loss"' in line]


FAMILIES = [
    ("tiny-gemma3", 2, "fp32"), ("tiny-olmo2", 2, "fp32"), ("tiny-gpt-neox", 2, "fp32"),
    ("tiny-starcoder2", 2, "fp32"), ("tiny-mixtral", 2, "fp32"), ("tiny-qwen3-moe", 2, "fp32"),
    ("tiny-olmoe", 2, "fp32"), ("tiny-phimoe", 2, "fp32"), ("tiny-gpt-oss", 2, "fp32"),
    ("tiny-gpt-neox", 1, "fp32"), ("tiny-mixtral", 1, "fp32"),
    # bf16 takes transformers' grouped expert matmul instead of the loop over experts.
    ("tiny-qwen3-moe", 2, "bf16"),
]
# GPT-2: wrapped at the block class transformers declares (_no_split_modules).
# model.hf_config directories of the introspected Mixtures of Experts, and those that
# also train under expert parallelism 2 (Llama 4's config names no experts module: FS160).
INTROSPECTED = ("tiny-deepseek-v3", "tiny-glm4-moe", "tiny-llama4-text")
EXPERT_PARALLEL = ("tiny-deepseek-v3", "tiny-glm4-moe")
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 320,
        "n_positions": 64, "bos_token_id": 256, "eos_token_id": 256}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object]]:
    """Each family's run directory and its result, by test id; GPT-2 under "gpt2"."""
    root = tmp_path_factory.mktemp("families")
    jobs = {f"{p}-{v}-{m}": job(p, v, m) for p, v, m in FAMILIES}
    (root / "gpt2-config").mkdir()
    (root / "gpt2-config" / "config.json").write_text(json.dumps(GPT2))
    jobs["gpt2"] = {**job("tiny-llama", 2), "model": {"hf_config": str(root / "gpt2-config")}}
    for name in INTROSPECTED:
        jobs[name] = {**job(name, 2), "model": {"hf_config": str(MODELS / name)}}
    for name in EXPERT_PARALLEL:
        jobs[f"{name}-ep2"] = {**jobs[name], "parallelism": {"expert_parallel": 2}}
    specs = [write_resolved_spec(JobSpec.model_validate(data), root / name)
             for name, data in jobs.items()]
    return {name: (root / name, result)
            for name, result in zip(jobs, torchrun_jobs(specs), strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize(("preset", "version", "precision"), FAMILIES)
def test_family_trains(preset: str, version: int, precision: str, trained) -> None:
    run_dir, done = trained[f"{preset}-{version}-{precision}"]
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    found = losses(run_dir)
    assert len(found) == 4 and all(math.isfinite(x) for x in found)
    assert found[-1] < found[0]


def test_moe_loss_includes_the_weighted_load_balancing_loss() -> None:
    import torch.nn.functional as F

    from fsdpspec.job.job import resolve
    from fsdpspec_runners.engine.loss import causal_lm_loss
    from fsdpspec_runners.engine.model_build import build_model

    spec = JobSpec.model_validate(job("tiny-mixtral", 2))
    model = build_model(resolve(spec, Path(".")), on_meta=False)
    batch = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    output = model(batch)
    assert output.aux_loss is not None  # the engine asks for the router logits
    labels = F.pad(batch[:, 1:], (0, 1), value=-100)
    cross_entropy = F.cross_entropy(output.logits.flatten(0, 1), labels.flatten(),
                                    ignore_index=-100)
    coefficient = preset_config("tiny-mixtral")["router_aux_loss_coef"]
    expected = cross_entropy + coefficient * output.aux_loss
    assert torch.allclose(causal_lm_loss(model, {"input_ids": batch}), expected)
    assert coefficient * output.aux_loss > 0


@pytest.mark.slow
def test_a_family_without_an_analytic_plan_trains(trained) -> None:
    run_dir, done = trained["gpt2"]
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    assert len(losses(run_dir)) == 4


def metric(run_dir: Path, name: str) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)[name] for line in lines if f'"{name}"' in line]


@pytest.mark.slow
@pytest.mark.parametrize("name", INTROSPECTED)
def test_an_introspected_moe_trains(name: str, trained) -> None:
    run_dir, done = trained[name]
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    found = losses(run_dir)
    assert len(found) == 4 and all(math.isfinite(x) for x in found)
    assert found[-1] < found[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPERT_PARALLEL)
def test_an_introspected_moe_trains_under_expert_parallelism_as_without(name: str,
                                                                         trained) -> None:
    run_dir, done = trained[f"{name}-ep2"]
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    assert "experts efsdp 1 × ep 2" in done.stdout + done.stderr
    without = trained[name][0]
    for name in ("loss", "grad_norm"):
        assert metric(run_dir, name) == pytest.approx(metric(without, name), rel=1e-5)
