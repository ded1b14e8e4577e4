"""Multi-node launch logic on one host: two `fsdpspec run --node-rank` processes (one
per "node", one process each) rendezvous over c10d as an sbatch script's nodes would,
and train one job in one shared run directory. Node 1 starts first and waits for node 0
to prepare the directory."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def node(rank: int, endpoint: str, cwd: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "fsdpspec", "run", str(QUICKSTART),
            "--set", "resources.gpus_per_node=1", "--set", "train.max_steps=6",
            "--set", "checkpoint.interval_steps=3", "--set", "logging.interval_steps=1",
            "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", endpoint,
            "--rdzv-id", "4242"]
    return subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def test_two_node_ranks_train_one_job_in_one_run_directory(tmp_path: Path) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    run_dir = tmp_path / "runs" / "quickstart"
    second = node(1, endpoint, tmp_path)
    time.sleep(2)
    assert second.poll() is None  # waiting for node 0's resolved-spec.json
    first = node(0, endpoint, tmp_path)
    outputs = [p.communicate(timeout=300)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    assert f"starting quickstart in {run_dir}" in outputs[0]
    assert f"joining quickstart in {run_dir}" in outputs[1]
    # c10d's rendezvous orders the agents itself (torchrun ignores --node-rank for it), so
    # global rank 0, which logs the steps, stands on either node.
    assert sum("step 6/6" in output for output in outputs) == 1, outputs
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step-*")) == [
        "step-00000003", "step-00000006"]
    assert (run_dir / "final" / "model.safetensors").is_file()
    assert not list(run_dir.glob(".fsdpspec-run*"))  # each node's lock is released


def test_one_node_rank_runs_once(tmp_path: Path) -> None:
    """The lock is per node rank: a second node 1 on the directory is refused at once,
    with the holder named."""
    endpoint = f"127.0.0.1:{free_port()}"
    waiting = node(1, endpoint, tmp_path)
    time.sleep(2)
    again = node(1, endpoint, tmp_path)
    output = again.communicate(timeout=60)[0]
    waiting.kill()
    waiting.communicate()
    assert again.returncode == 1, output
    assert f"is in use by another `fsdpspec run` (pid {waiting.pid})" in output
