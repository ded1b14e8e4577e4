"""Issue 45: torchtitan's own debug TOMLs of its Mixture-of-Experts models (qwen3
`debugmodel_moe`, gpt_oss, deepseek_v3 and llama4 `debugmodel`) import as their families
at the flavor's shape, validate, and train 2 steps on 2 CPU processes (gloo) through
`fsdpspec run` as a user types it. Only what this machine cannot hold at the TOML's values
is changed with `--set`: the machine, sequence, batch and steps (and one warmup step of
the two); the model, sharding, precision and checkpointing are the import's. The qwen3
flavor (302M expert parameters, bfloat16 on CPU) is most of the cost: ~14 CPU-s a step
a rank, most of it moving and page-faulting its gathered experts and gradients."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from conftest import ROOT, run_cli  # noqa: E402
from fsdpspec.cli.main import cli  # noqa: E402

TOMLS = ROOT / "tests" / "convert" / "configs" / "torchtitan"
DEBUG = {"2026-qwen3_moe_debug.toml": "torchtitan-qwen3-moe-debug",
         "2026-gpt_oss-debug_model.toml": "torchtitan-gpt-oss-debug",
         "2026-deepseek_v3-debug_model.toml": "torchtitan-deepseek-v3-debug",
         "2026-llama4-debug_model.toml": "torchtitan-llama4-debug"}
# What this machine changes, as a user types it: the machine (its CPUs and RAM), the
# sequence, batch and steps, one warmup step of the two (FS502: warmup < max_steps), and
# no final export.
CPU_SIZES = ("resources.accelerator=cpu", "resources.host_memory_gib=16", "data.seq_len=32",
             "data.micro_batch_size=1", "data.global_batch_size=2", "train.max_steps=2",
             "optimizer.scheduler.warmup_steps=1", "checkpoint.final.enabled=false")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object, str]]:
    """Each TOML's run directory, its `fsdpspec run` and what its import said."""
    root = tmp_path_factory.mktemp("torchtitan-debug")
    done = {}
    for name in DEBUG:
        written = root / f"{name}.yaml"
        result = CliRunner().invoke(cli, ["import", "torchtitan", str(TOMLS / name), "-o",
                                          str(written), "--gpus-per-node", "2"])
        assert result.exit_code == 0, result.output
        assert run_cli("validate", str(written)).returncode == 0
        sets = [word for value in CPU_SIZES for word in ("--set", value)]
        ran = run_cli("run", str(written), *sets, cwd=root, timeout=900)
        run_dir = next((root / "runs").glob(f"job-{name.removesuffix('.toml')}*"
                                            .replace("_", "-").replace(".", "-")), None)
        done[name] = (run_dir, ran, result.output)
    return done


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DEBUG))
def test_torchtitan_debug_moe_trains_as_its_family(name: str, trained) -> None:
    run_dir, done, _ = trained[name]
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    assert "step 2/2" in done.stdout + done.stderr
    resolved = json.loads((run_dir / "resolved-spec.json").read_text())
    assert resolved["spec"]["model"]["preset"] == DEBUG[name]
    steps = [json.loads(line) for line in
             (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert [step["step"] for step in steps] == [1, 2]
    assert all(math.isfinite(step["loss"]) and 0 < step["grad_norm"] < math.inf
               for step in steps), steps


@pytest.mark.slow
def test_the_deepseek_flavor_s_router_is_said_to_differ(trained) -> None:
    """The shape and the count are the flavor's; its softmax router is not transformers'."""
    said = trained["2026-deepseek_v3-debug_model.toml"][2]
    assert ":22: [model] deepseek_v3 debugmodel: torchtitan's router scores the experts by " \
        "softmax (score_func); transformers' deepseek_v3 scores them by sigmoid with a " \
        "correction bias, which is how the engine routes" in said
