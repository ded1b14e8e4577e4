"""Elastic resume: a run resumed on another process count with the same global batch
reshards its checkpoint and continues at the same step and data position, and says so
in one line; another global batch stays refused, naming the field. Both checkpoint
layouts: SHARDED (DCP reshards, here 2 → 1 processes) and FULL_STATE_DICT (every rank
keeps its own shards of the one file, here 1 → 3). Each resumed run's losses match an
uninterrupted run's, step for step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fault_jobs import fsdpspec_run, job_file, run_dir

from conftest import run_cli
from fsdpspec.runfiles.fault_settings import SIGNAL_AT_STEP_ENV

pytestmark = pytest.mark.slow

# 6 sequences per step: 6 micro-batches of 1 on 1 process, 3 on 2, 2 on 3.
JOB = {"data": {"global_batch_size": 6, "micro_batch_size": 1},
       "checkpoint": {"interval_steps": 10}, "train": {"max_steps": 20}}


def losses(run: Path) -> dict[int, float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


def ok(result):
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    job = job_file(tmp_path_factory.mktemp("straight"), JOB)
    ok(fsdpspec_run(job))
    return losses(run_dir(job))


@pytest.mark.parametrize(("state_dict_type", "before", "after"), [
    ("SHARDED_STATE_DICT", 2, 1), ("FULL_STATE_DICT", 1, 3)])
def test_a_run_resumed_on_another_process_count_continues_exactly(
        tmp_path: Path, uninterrupted: dict[int, float], state_dict_type: str,
        before: int, after: int) -> None:
    job = job_file(tmp_path, {**JOB, "fsdp": {"state_dict_type": state_dict_type}})
    ok(fsdpspec_run(job, "--set", "train.max_steps=10",
                    "--set", f"resources.gpus_per_node={before}"))
    resumed = ok(fsdpspec_run(job, "--set", f"resources.gpus_per_node={after}"))
    processes = f"{after} process{'es' if after > 1 else ''}"
    assert (f"new layout: {processes}, was {before} (resources.gpus_per_node {before} → "
            f"{after}); the checkpoint is resharded and the run continues at its step and "
            "data position (global batch 6)") in resumed.stderr.splitlines()
    assert "(step 10)" in resumed.stdout
    steps = losses(run_dir(job))
    assert sorted(steps) == list(range(1, 21))
    # The same sequences in the same order each step: the same losses, to float noise.
    assert max(abs(steps[s] - uninterrupted[s]) for s in steps) < 1e-4
    # Another global batch is another job still, whatever the layout.
    refused = fsdpspec_run(job, "--set", "data.global_batch_size=12")
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        f"Error: {run_dir(job)} holds a run of 'engine-test' with a different "
        "data.global_batch_size: set checkpoint.dir to a new directory, or remove the old run")


def test_each_step_takes_the_same_sequences_on_any_layout() -> None:
    """Data order: step s is global sequences [s·G, (s+1)·G), however they are split
    over processes and micro-batches; so a resumed layout neither repeats nor skips."""
    from fsdpspec.job.layout import layout
    from fsdpspec.spec.v1 import JobSpec
    from fsdpspec_runners.engine.data import Batches, SequenceSource

    def step_rows(world: int, micro: int, position: int) -> list[tuple[int, ...]]:
        spec = JobSpec.model_validate({
            "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "order"},
            "resources": {"gpus_per_node": world, "accelerator": "cpu"},
            "model": {"preset": "tiny-llama"},
            "data": {"source": "synthetic", "seq_len": 8, "micro_batch_size": micro,
                     "global_batch_size": 6}})
        source = SequenceSource(spec.data, vocab_size=320, seed=3)
        rows = []
        for rank in range(world):
            batches = Batches(source, layout(spec, world).batch, rank)
            batches.load_state_dict({"position": position})
            rows += [tuple(r.tolist()) for b in batches.next_step() for r in b["input_ids"]]
        return sorted(rows)

    for position in (0, 60):
        layouts = [step_rows(w, m, position) for w, m in ((1, 1), (1, 6), (2, 1), (2, 3), (3, 2))]
        assert all(rows == layouts[0] for rows in layouts) and len(layouts[0]) == 6


QUICKSTART = ("examples/quickstart.yaml", "--set", "train.max_steps=6",
              "--set", "logging.interval_steps=1")


@pytest.fixture(scope="module")
def quickstart_tp1(tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    """The quickstart's 6 steps at TP 1, uninterrupted."""
    run = tmp_path_factory.mktemp("tp1") / "q"
    ok(run_cli("run", *QUICKSTART, "--set", f"checkpoint.dir={run}", timeout=300))
    return losses(run)


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)])
def test_a_changed_tensor_parallel_degree_continues_in_the_same_run_directory(
        tmp_path: Path, quickstart_tp1: dict[int, float], before: int, after: int) -> None:
    """A preempted 2-D job that comes back with another TP degree is a layout change, as
    another GPU count is: the same directory, one line, DCP reshards (issue 42 §7)."""
    run = tmp_path / "q"
    degree = "parallelism.tensor_parallel"
    first = run_cli("run", *QUICKSTART, "--set", f"checkpoint.dir={run}", "--set",
                    f"{degree}={before}", env={SIGNAL_AT_STEP_ENV: "3"}, timeout=300)
    assert "stopped by SIGTERM at step 3; checkpoint saved" in first.stdout + first.stderr
    resumed = ok(run_cli("run", *QUICKSTART, "--set", f"checkpoint.dir={run}", "--set",
                         f"{degree}={after}", timeout=300))
    assert (f"new layout: the same 2 processes ({degree} {before} → {after}); the checkpoint "
            "is resharded and the run continues at its step and data position (global batch "
            "8)") in resumed.stderr.splitlines()
    steps = losses(run)
    assert sorted(steps) == list(range(1, 7))
    assert max(abs(steps[s] - quickstart_tp1[s]) for s in range(4, 7)) < 1e-5
