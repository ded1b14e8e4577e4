"""Issue 45: torchtitan's own debug TOMLs of its Mixture-of-Experts models import as their
families at the flavor's shape (qwen3 `debugmodel_moe`, gpt_oss, deepseek_v3 and llama4
`debugmodel`) and train
with the real engine on 2 CPU processes (gloo). Only the sizes a CPU cannot hold at the
TOML's values are changed: the machine, sequence, batch and steps; the model,
sharding, precision and checkpointing are the import's. Both jobs run in one launch
(engine_jobs.torchrun_jobs). One step each: a step of the qwen3 flavor (302M expert
parameters, bfloat16 on CPU) costs each rank ~14 CPU-s, most of it moving and
page-faulting its gathered experts and gradients; one step is forward, backward,
reduce-scatter and the optimizer, and the flavor's shape is what is tested."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from engine_jobs import merged, torchrun_jobs  # noqa: E402

from conftest import ROOT  # noqa: E402
from fsdpspec.cli.main import cli  # noqa: E402
from fsdpspec.runfiles.resolved import write_resolved_spec  # noqa: E402
from fsdpspec.spec.load import load_file  # noqa: E402
from fsdpspec.spec.v1 import JobSpec  # noqa: E402

TOMLS = ROOT / "tests" / "convert" / "configs" / "torchtitan"
DEBUG = {"2026-qwen3_moe_debug.toml": "torchtitan-qwen3-moe-debug",
         "2026-gpt_oss-debug_model.toml": "torchtitan-gpt-oss-debug",
         "2026-deepseek_v3-debug_model.toml": "torchtitan-deepseek-v3-debug",
         "2026-llama4-debug_model.toml": "torchtitan-llama4-debug"}
CPU_SIZES = {"resources": {"accelerator": "cpu"},
             "data": {"seq_len": 32, "micro_batch_size": 1, "global_batch_size": 2},
             "train": {"max_steps": 1}, "checkpoint": {"final": {"enabled": False}}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object, str]]:
    root = tmp_path_factory.mktemp("torchtitan-debug")
    specs, said = [], {}
    for name in DEBUG:
        written = root / f"{name}.yaml"
        result = CliRunner().invoke(cli, ["import", "torchtitan", str(TOMLS / name), "-o",
                                          str(written), "--gpus-per-node", "2"])
        assert result.exit_code == 0, result.output
        said[name] = result.output
        job = merged(load_file(written).data, CPU_SIZES)
        del job["resources"]["host_memory_gib"]  # the GPU hosts' RAM the import assumed
        specs.append(write_resolved_spec(JobSpec.model_validate(job), root / name))
    return {name: (spec.parent, result, said[name])
            for name, spec, result in zip(DEBUG, specs, torchrun_jobs(specs), strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DEBUG))
def test_torchtitan_debug_moe_trains_as_its_family(name: str, trained) -> None:
    run_dir, done, _ = trained[name]
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    resolved = json.loads((run_dir / "resolved-spec.json").read_text())
    assert resolved["spec"]["model"]["preset"] == DEBUG[name]
    steps = [json.loads(line) for line in
             (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert [step["step"] for step in steps] == [1]
    assert math.isfinite(steps[0]["loss"]) and 0 < steps[0]["grad_norm"] < math.inf, steps


@pytest.mark.slow
def test_the_deepseek_flavor_s_router_is_said_to_differ(trained) -> None:
    """The shape and the count are the flavor's; its softmax router is not transformers'."""
    said = trained["2026-deepseek_v3-debug_model.toml"][2]
    assert ":22: [model] deepseek_v3 debugmodel: torchtitan's router scores the experts by " \
        "softmax (score_func); transformers' deepseek_v3 scores them by sigmoid with a " \
        "correction bias, which is how the engine routes" in said
