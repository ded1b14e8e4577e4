"""Crash safety of checkpoints, and restarts — faults caused for real on `fsdpspec run`
(torchrun, 2 processes on gloo): a rank dies by SIGKILL inside a checkpoint save, or in
the middle of a step, and the job still ends with exactly the weights of a run nobody
killed (bitwise: fp32 on the CPU, one thread per process).

Every run is the same job: tiny-llama, seq_len 32, constant lr, 6 steps, a checkpoint
every 2 steps. Killing is done by the engine's fault-injection point (runners/engine/faults.py:
FSDPSPEC_TEST_PAUSE_IN_SAVE, FSDPSPEC_TEST_KILL_AT_STEP)
and by this test's own SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from engine_jobs import final_weights, metrics
from fault_jobs import ROOT, fsdpspec_run, job_file, run_argv, run_dir, run_env

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")

JOB = {"train": {"max_steps": 6}, "checkpoint": {"interval_steps": 2}}
PAUSE_S = 8  # each save sleeps this long between writing its shards and publishing them


def ok(result: subprocess.CompletedProcess) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run's final weights. Its run directory starts with the lock file
    of a killed run (a dead pid): `fsdpspec run` takes the stale lock over."""
    job = job_file(tmp_path_factory.mktemp("reference"), JOB)
    stale = run_dir(job) / ".fsdpspec-run.lock"
    stale.parent.mkdir()
    stale.write_text(f"{dead_pid()} localhost\n")
    ok(fsdpspec_run(job))
    assert not stale.exists()  # released at the end
    assert [m["step"] for m in metrics(run_dir(job))] == [1, 2, 3, 4, 5, 6]
    return final_weights(run_dir(job))


def _descendants(pid: int) -> list[int]:
    from fsdpspec_runners.local.supervise import children

    found = []
    for child in children(pid):
        found += [child, *_descendants(child)]
    return found


def _worker(root: int, rank: int) -> int:
    """The pid of the engine process of ``rank`` below the `fsdpspec run` process ``root``."""
    for pid in _descendants(root):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"fsdpspec_runners.engine" in cmdline and f"RANK={rank}".encode() in environ:
            return pid
    raise AssertionError(f"no rank {rank} engine process below pid {root}")


def _wait_for(path: Path, process: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, f"the run ended before {path} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout_s} s"
        time.sleep(0.05)


def test_kill_inside_a_save_keeps_the_previous_checkpoint(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    """SIGKILL to rank 0 (the rank that publishes) after the step-4 save has written
    every shard and its .metadata, before the rename: step 2 stays latest, the unpublished
    save is never resumed from, and running again reaches the reference weights. While
    the first run lives, a second `fsdpspec run` of its directory is refused."""
    job = job_file(tmp_path, JOB)
    checkpoints = run_dir(job) / "checkpoints"
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(run_argv(job), cwd=ROOT, env=run_env(
        FSDPSPEC_TEST_PAUSE_IN_SAVE=str(PAUSE_S)), stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(run_dir(job) / ".fsdpspec-run.lock", first)
        second = fsdpspec_run(job)
        assert second.returncode == 1
        assert second.stderr.strip().splitlines()[-1] == (
            f"Error: {run_dir(job)} is in use by another `fsdpspec run` (pid {first.pid}): "
            "wait for it to finish, or stop it")
        _wait_for(checkpoints / ".tmp-step-00000004" / ".metadata", first)
        os.kill(_worker(first.pid, rank=0), signal.SIGKILL)
        assert first.wait(timeout=120) != 0
    finally:
        first.kill()
        log.close()
    from fsdpspec_runners.engine.checkpoint import find_resume_checkpoint

    assert (checkpoints / "latest").read_text().strip() == "step-00000002"
    assert not (checkpoints / "step-00000004").exists()
    assert find_resume_checkpoint("auto", run_dir(job)) == checkpoints / "step-00000002"
    output = ok(fsdpspec_run(job))
    assert f"resumed from {checkpoints / 'step-00000002'} (step 2)" in output
    assert same_weights(final_weights(run_dir(job)), reference)
    assert not list(checkpoints.glob(".tmp-*"))
    assert (checkpoints / "latest").read_text().strip() == "step-00000006"


def test_torchrun_restarts_a_group_whose_rank_died_mid_step(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    """launch.max_restarts: 1 and rank 1 SIGKILLed inside step 5 (first attempt only):
    torchrun restarts both ranks, the engine resumes from step 4 and the run ends with the
    reference weights; every step is logged once."""
    job = job_file(tmp_path, {**JOB, "launch": {"max_restarts": 1}})
    output = ok(fsdpspec_run(job, FSDPSPEC_TEST_KILL_AT_STEP="5:1"))
    assert output.count("resumed from") == 1
    assert f"resumed from {run_dir(job) / 'checkpoints' / 'step-00000004'} (step 4)" in output
    assert [m["step"] for m in metrics(run_dir(job))] == [1, 2, 3, 4, 5, 6]
    assert same_weights(final_weights(run_dir(job)), reference)
