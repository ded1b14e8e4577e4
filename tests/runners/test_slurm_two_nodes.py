"""Exported multi-node sbatch scripts on a real two-node Slurm (the session's cluster,
tests/support/slurm_cluster.py): each node is a network namespace of its own, so the
rendezvous, gloo and srun really cross hosts.

1. a fresh export of the quickstart on `nodes: 2` (no rdzv_endpoint: the script derives
   it), submitted with plain `sbatch` from the run root, trains on both nodes to
   `final/`;
2. the same job with another learning rate, submitted into that run directory, fails
   with `fsdpspec run`'s one-line refusal and leaves the first run's files as they were;
3. SIGTERM to the processes of one node only: every rank of both nodes stops after the
   same step with a checkpoint, every process exits within 60 s, and the job requeues
   itself;
4. one node lost with everything on it: Slurm requeues the job, and once the node is
   back the job resumes from its last checkpoint and completes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_cluster import Cluster, digest, running

from conftest import QUICKSTART

pytestmark = pytest.mark.slow

TWO_NODES = ("resources.nodes=2", "resources.gpus_per_node=1")
# How long a lost node stays away once its job is requeued: past slurmctld's retry of
# the terminate it could not deliver (about 60 s after the requeue).
NODE_AWAY_S = 75


def export(root: Path, *overrides: str) -> Path:
    """The quickstart on two nodes, exported as ``root``/job.sbatch."""
    script = root / "job.sbatch"
    args = [a for o in (*TWO_NODES, *overrides) for a in ("--set", o)]
    result = subprocess.run([sys.executable, "-m", "fsdpspec", "export", "slurm",
                             str(QUICKSTART), *args, "-o", str(script)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return script


def log_path(root: Path, job_id: str) -> Path:
    return root / f"quickstart-{job_id}.out"


def wait_for_line(slurm: Cluster, root: Path, job_id: str, text: str) -> None:
    log, deadline = log_path(root, job_id), time.monotonic() + 300
    while not (log.exists() and text in log.read_text()):
        assert time.monotonic() < deadline, slurm.job(job_id)
        time.sleep(0.3)


@pytest.fixture(scope="module")
def two_node_run(slurm: Cluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Item 1: plain `sbatch job.sbatch` of a fresh export, in a fresh run root."""
    root = tmp_path_factory.mktemp("two-nodes")
    export(root)
    job_id = slurm.submit(["sbatch", "job.sbatch"], cwd=root)
    job = slurm.wait_until_done(job_id)
    assert job["JobState"] == "COMPLETED", log_path(root, job_id).read_text()[-3000:]
    assert job["NodeList"] == "n[1-2]" and job["NumNodes"] == "2"
    return root, job_id


def test_plain_sbatch_trains_across_both_nodes(two_node_run: tuple[Path, str]) -> None:
    root, job_id = two_node_run
    log = log_path(root, job_id).read_text()
    # Node 0 prepared the run directory, node 1 joined it; one world of 2 ranks.
    assert "starting quickstart" in log and "joining quickstart" in log
    assert "2 processes on cpu" in log and "step 40/40" in log
    run_dir = root / "runs" / "quickstart"
    assert (run_dir / "final" / "model.safetensors").is_file()
    assert (run_dir / "slurm" / f"job-{job_id}.json").is_file()


def test_a_changed_job_is_refused_and_the_first_run_is_untouched(
        slurm: Cluster, two_node_run: tuple[Path, str]) -> None:
    root, _ = two_node_run
    run_dir = root / "runs" / "quickstart"
    before = digest(run_dir / "checkpoints") | digest(run_dir / "final")
    other = root / "other"
    other.mkdir()
    job_id = slurm.submit(["sbatch", str(export(other, "optimizer.lr=0.001"))], cwd=root)
    done = slurm.wait_until_done(job_id)
    log = log_path(root, job_id).read_text()
    # Refused on its node; the other node stopped by srun is no reason to requeue.
    assert done["JobState"] == "FAILED" and done["Restarts"] == "0", log
    assert (f"Error: {run_dir} holds a run of 'quickstart' with a different optimizer.lr: "
            "set checkpoint.dir to a new directory, or remove the old run") in log
    assert "Traceback" not in log
    assert digest(run_dir / "checkpoints") | digest(run_dir / "final") == before


def test_a_signal_to_one_node_stops_every_node_and_requeues(
        slurm: Cluster, tmp_path: Path) -> None:
    export(tmp_path, "train.max_steps=1000000", "checkpoint.interval_steps=0",
           "logging.interval_steps=10")
    job_id = slurm.submit(["sbatch", "job.sbatch"], cwd=tmp_path)
    wait_for_line(slurm, tmp_path, job_id, "\nstep 20/")
    first, second = slurm.job_pids("n1"), slurm.job_pids("n2")
    assert first and second
    signalled = time.monotonic()
    for pid in second:  # fsdpspec run, torchrun and the rank of node 2; nothing of node 1
        os.kill(pid, signal.SIGTERM)
    while any(running(p) for p in first + second):
        assert time.monotonic() - signalled < 60, [p for p in first + second if running(p)]
        time.sleep(0.2)
    requeued = slurm.wait_for(job_id, {"PENDING", "COMPLETED", "FAILED", "CANCELLED"}, 60)
    slurm.run("scancel", job_id)
    log = log_path(tmp_path, job_id).read_text()
    assert requeued["JobState"] == "PENDING" and requeued["Restarts"] == "1", log
    stopped = re.search(r"stopped by SIGTERM at step (\d+); checkpoint saved", log)
    assert stopped, log
    step_dir = f"step-{int(stopped.group(1)):08d}"
    assert (tmp_path / "runs" / "quickstart" / "checkpoints" / step_dir).is_dir()
    # Both nodes' `fsdpspec run` ended as a stopped run, node 1's too, which no signal
    # reached; the script, not Slurm, requeued it.
    assert log.count(f"stopped by SIGTERM; `fsdpspec run` again resumes from checkpoint "
                     f"{step_dir}") == 2
    assert "fsdpspec: stopped by a signal to a node (exit 143); requeueing" in log


def test_a_lost_node_requeues_and_the_job_resumes_to_completion(
        slurm: Cluster, tmp_path: Path) -> None:
    export(tmp_path, "train.max_steps=150", "checkpoint.interval_steps=50",
           "logging.interval_steps=10")
    job_id = slurm.submit(["sbatch", "job.sbatch"], cwd=tmp_path)
    wait_for_line(slurm, tmp_path, job_id, "\nstep 70/")
    slurm.lose("n2")
    try:
        requeued = slurm.wait_for(job_id, {"PENDING"}, 120)
        assert requeued["Restarts"] == "1"
        # Back too soon, the node meets the Slurm 22.05 caveat (docs/clusters.md): the
        # requeued job's step waits on the lost one's, or is killed by its terminate.
        time.sleep(NODE_AWAY_S)
    finally:
        slurm.start_node("n2")
    slurm.wait_idle()
    slurm.start_now(job_id)
    job = slurm.wait_until_done(job_id)
    log = log_path(tmp_path, job_id).read_text()
    assert job["JobState"] == "COMPLETED", log[-3000:]
    # Who requeues is a race: Slurm, once it marks the node down (SlurmdTimeout; the
    # batch step or srun says so), or the batch script, once srun has ended the
    # surviving node's run with SIGTERM (--kill-on-bad-exit) before that. Either way
    # the job runs again and resumes.
    assert any(said in log for said in (
        "DUE TO NODE FAILURE", "srun: error: Node failure on n2",
        "fsdpspec: stopped by a signal to a node (exit 143); requeueing")), log[-3000:]
    first, second = log.split("resuming quickstart", 1)
    assert "step 70/150" in first
    assert "resumed from" in second and "(step 50)" in second and "step 150/150" in second
    assert (tmp_path / "runs" / "quickstart" / "final" / "model.safetensors").is_file()
