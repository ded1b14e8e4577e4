"""Exported single-node sbatch scripts on a real Slurm (the session's cluster, see
tests/runners/conftest.py; its two nodes take one such job each):

1. the exported quickstart, submitted with `bash THIS_FILE`, trains to completion;
2. `scontrol requeue` mid-run: the job checkpoints on SIGTERM, requeues, resumes and
   ends with the weights of an uninterrupted run, bit for bit; its log keeps both halves;
3. the same job with another learning rate, submitted into the same run directory, fails
   with the one-line refusal `fsdpspec run` gives, and the first run's files stay as
   they were;
4. a job that reaches its time limit is warned first (SIGUSR1), checkpoints and requeues
   (submitted first: it waits on one node while the others run on the other).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from slurm_cluster import Cluster, digest

from conftest import ROOT

pytestmark = pytest.mark.slow

QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def export(root: Path, *overrides: str) -> Path:
    """The quickstart exported into the run root ``root``, as job.sbatch."""
    script = root / "job.sbatch"
    args = [a for o in overrides for a in ("--set", o)]
    result = subprocess.run([sys.executable, "-m", "fsdpspec", "export", "slurm",
                             str(QUICKSTART), *args, "-o", str(script)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return script


def log_of(root: Path, job_id: str) -> str:
    """The job's log, in the submit directory."""
    return (root / f"quickstart-{job_id}.out").read_text()


@pytest.fixture(scope="module", autouse=True)
def time_limited_job(slurm: Cluster, tmp_path_factory: pytest.TempPathFactory):
    """Item 4's job, submitted before the others: it spends most of its life waiting for
    Slurm's once-a-minute time check, on one node, while the other tests use the other.
    A watcher cancels it at its first requeue (a requeued job would train again) and
    keeps what it saw: (run root, job id, a thread to join, the job once requeued)."""
    root = tmp_path_factory.mktemp("time-limit")
    script = export(root, "train.max_steps=1000000", "checkpoint.interval_steps=0",
                    "logging.interval_steps=100", "launch.slurm.time=00:02:30")
    assert "#SBATCH --signal=B:USR1@60" in script.read_text()
    # Paused steps: the job waits on Slurm's clock, not on the cores the other tests use.
    job_id = slurm.submit(["sbatch", str(script)], cwd=root,
                          env={"FSDPSPEC_TEST_STEP_PAUSE": "0.2"})
    seen: dict[str, str] = {}

    def watch() -> None:
        deadline = time.monotonic() + 420
        job = slurm.job(job_id)
        while job.get("Restarts") == "0" and job["JobState"] in ("PENDING", "RUNNING"):
            if time.monotonic() > deadline:
                break
            time.sleep(1)
            job = slurm.job(job_id)
        # The requeue passes through COMPLETING (the step's processes end) to PENDING.
        if job.get("Restarts") != "0":
            job = slurm.wait_for(job_id, {"PENDING", "TIMEOUT", "FAILED", "COMPLETED"}, 120)
        slurm.run("scancel", job_id)
        seen.update(job)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    yield root, job_id, watcher, seen
    watcher.join(timeout=600)
    slurm.run("scancel", job_id)


@pytest.fixture(scope="module")
def quickstart_run(slurm: Cluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Item 1: the quickstart exported unedited and submitted (`bash THIS_FILE` calls
    sbatch), run to its end."""
    root = tmp_path_factory.mktemp("quickstart")
    job_id = slurm.submit(["bash", str(export(root))], cwd=root)
    job = slurm.wait_for(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
    assert job["JobState"] == "COMPLETED", log_of(root, job_id)
    return root, job_id


def test_exported_quickstart_trains_to_completion(quickstart_run: tuple[Path, str]) -> None:
    root, job_id = quickstart_run
    run_dir = root / "runs" / "quickstart"
    log = log_of(root, job_id)
    assert "starting quickstart" in log and "step 40/40" in log
    assert (run_dir / "final" / "model.safetensors").is_file()
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step-*")) == [
        "step-00000020", "step-00000040"]
    assert (run_dir / "resolved-spec.json").is_file()


def test_a_different_lr_is_refused_and_the_first_run_is_untouched(
        slurm: Cluster, quickstart_run: tuple[Path, str]) -> None:
    """Item 3: the same one-line refusal as `fsdpspec run`; nothing of the first run
    changes."""
    root, _ = quickstart_run
    run_dir = root / "runs" / "quickstart"
    before = digest(run_dir / "checkpoints") | digest(run_dir / "final")
    other = root / "other"
    other.mkdir()
    script = export(other, "optimizer.lr=0.001")
    job_id = slurm.submit(["sbatch", str(script)], cwd=root)
    assert slurm.wait_for(job_id, {"COMPLETED", "FAILED"})["JobState"] == "FAILED"
    local = subprocess.run([sys.executable, "-m", "fsdpspec", "run", str(QUICKSTART),
                            "--set", "optimizer.lr=0.001"], cwd=root, capture_output=True,
                           text=True, timeout=60)
    refusal = local.stderr.strip().splitlines()[-1]
    assert local.returncode == 1 and "with a different optimizer.lr" in refusal
    assert refusal in log_of(root, job_id).splitlines()
    assert "Traceback" not in log_of(root, job_id)
    assert digest(run_dir / "checkpoints") | digest(run_dir / "final") == before


def test_requeue_checkpoints_resumes_and_matches_an_uninterrupted_run(
        slurm: Cluster, tmp_path: Path) -> None:
    """Item 2: `scontrol requeue` while it trains."""
    job = ("train.max_steps=60", "checkpoint.interval_steps=1000", "logging.interval_steps=1")
    root = tmp_path / "slurm"
    root.mkdir()
    job_id = slurm.submit(["sbatch", str(export(root, *job))], cwd=root)
    deadline = time.monotonic() + 300
    log = root / f"quickstart-{job_id}.out"
    while not (log.exists() and "\nstep 10/" in log.read_text()):
        assert time.monotonic() < deadline, slurm.job(job_id)
        time.sleep(0.5)
    assert slurm.run("scontrol", "requeue", job_id).returncode == 0
    slurm.start_now(job_id)
    final = slurm.wait_for(job_id, {"COMPLETED", "FAILED", "CANCELLED"})
    text = log_of(root, job_id)
    assert final["JobState"] == "COMPLETED" and final["Restarts"] == "1", text
    stopped = re.search(r"stopped by SIGTERM at step (\d+); checkpoint saved", text)
    assert stopped, text
    # Both halves, in order, in one log.
    first, second = text.split("resuming quickstart", 1)
    assert "starting quickstart" in first and stopped.group(0) in first
    assert f"(step {stopped.group(1)})" in second and "step 60/60" in second

    reference = tmp_path / "reference"
    reference.mkdir()
    straight = subprocess.run(
        [sys.executable, "-m", "fsdpspec", "run", str(QUICKSTART),
         *[a for o in job for a in ("--set", o)]],
        cwd=reference, capture_output=True, text=True, timeout=600)
    assert straight.returncode == 0, straight.stderr[-3000:]
    weights = "runs/quickstart/final/model.safetensors"
    assert (root / weights).read_bytes() == (reference / weights).read_bytes()


def test_the_time_limit_is_warned_and_checkpointed_before_the_kill(
        time_limited_job: tuple) -> None:
    """Item 4: 150 s (export needs more than twice the 60 s warning), warned at least
    60 s ahead (--signal=B:USR1@60; Slurm checks about once a minute, so 30–90 s into
    the job): the job stops with a checkpoint of the step it reached, and requeues
    itself."""
    root, job_id, watcher, requeued = time_limited_job
    watcher.join(timeout=600)
    text = log_of(root, job_id)
    assert requeued["JobState"] == "PENDING" and requeued["Restarts"] == "1", text
    stopped = re.search(r"stopped by SIG\w+ at step (\d+); checkpoint saved", text)
    assert stopped, text
    checkpoints = root / "runs" / "quickstart" / "checkpoints"
    assert (checkpoints / f"step-{int(stopped.group(1)):08d}").is_dir()
    assert "stopped ahead of the time limit; requeueing" in text
    assert "CANCELLED" not in text.split("requeueing")[0]  # it ended before any kill
