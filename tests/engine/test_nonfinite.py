"""Training faults, caused for real: one rank of two (torchrun, gloo) produces a NaN loss
or a NaN gradient (tests/support/nonfinite_model.py) and the engine stops, or skips the step,
as ``train.on_nonfinite`` says — on every rank at the same step."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from engine_jobs import final_weights, metrics
from fault_jobs import fsdpspec_run, job_file, run_dir

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")

# One micro-batch per rank per step, so the model counts steps by its forward calls.
FACTORY = {
    "model": {"preset": None, "factory": "nonfinite_model:build"},
    "fsdp": {"transformer_layer_cls": ["Block"]},
    "data": {"global_batch_size": 2},
    "logging": {"interval_steps": 1},
}


def test_nan_gradient_stops_the_run_and_keeps_the_last_checkpoint(tmp_path: Path) -> None:
    """A NaN gradient on rank 1 at step 3 (the loss stays finite): exit 1, one error line
    naming the gradient norm and the step, no traceback; checkpoint step 2 stays latest
    and step 3 is neither logged nor saved."""
    job = job_file(tmp_path, {**FACTORY, "train": {"max_steps": 5},
                              "checkpoint": {"interval_steps": 1}})
    result = fsdpspec_run(job, FSDPSPEC_TEST_NAN_GRAD_AT="3")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert errors == ["fsdpspec engine: error: non-finite gradient norm nan at step 3; stopped "
                      "(train.on_nonfinite: stop); the last checkpoint is unchanged"], result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    run = run_dir(job)
    assert [m["step"] for m in metrics(run)] == [1, 2]
    assert all(math.isfinite(m["loss"]) for m in metrics(run))
    checkpoints = run / "checkpoints"
    assert (checkpoints / "latest").read_text().strip() == "step-00000002"
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        "latest", "step-00000001", "step-00000002"]
    assert not (run / "final").exists()


def test_skip_drops_exactly_the_nonfinite_steps(tmp_path: Path) -> None:
    """on_nonfinite: skip, a NaN loss at step 2 and a NaN gradient at step 4 (rank 1):
    the run finishes, exactly those steps are marked skipped, and the weights stay finite."""
    job = job_file(tmp_path, {**FACTORY, "train": {"max_steps": 5, "on_nonfinite": "skip"}})
    result = fsdpspec_run(job, FSDPSPEC_TEST_NAN_LOSS_AT="2", FSDPSPEC_TEST_NAN_GRAD_AT="4")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = {m["step"]: m for m in metrics(run_dir(job))}
    assert sorted(records) == [1, 2, 3, 4, 5]
    assert [s for s, m in records.items() if m["skipped"]] == [2, 4]
    assert math.isnan(records[2]["loss"]) and math.isfinite(records[4]["loss"])
    assert math.isnan(records[4]["grad_norm"])
    assert all(math.isfinite(records[s]["loss"]) for s in (1, 3, 5))
    weights = final_weights(run_dir(job))
    assert weights and all(torch.isfinite(t).all() for t in weights.values())
