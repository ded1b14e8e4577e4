"""The suite's warm engine ranks (support/warm_ranks/, started by conftest.py) behave as
cold ones do: the process torchrun started reports the rank's exit status or death by a
signal, the rank writes to its streams and runs in its directory with its arguments and
environment, and a rank whose process was killed dies with it. A training job trains
bit-identically warm and cold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_jobs import fsdpspec_run, job_file, run_dir
from safetensors.torch import load_file

from conftest import run_cli

PROBE = Path(__file__).parent / "support" / "warm_ranks_probe.py"


def _start(tmp_path: Path, *args: str, **env: str) -> subprocess.Popen:
    """The probe started as torchrun starts a rank script."""
    return subprocess.Popen(
        [sys.executable, "-u", str(PROBE), *args], cwd=tmp_path, text=True,
        env={**os.environ, "FSDPSPEC_TEST_PROBE": "yes", **env}, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _said(process: subprocess.Popen) -> dict:
    process.stdin.write("from stdin\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


@pytest.mark.parametrize(("how", "what", "returncode"), [
    ("exit", "0", 0), ("exit", "3", 3), ("signal", "SIGTERM", -signal.SIGTERM),
    ("signal", "SIGKILL", -signal.SIGKILL)])
def test_a_warm_rank_ends_as_a_cold_one(tmp_path: Path, how: str, what: str,
                                        returncode: int) -> None:
    process = _start(tmp_path, how, what)
    said = _said(process)
    assert process.wait(timeout=60) == returncode
    assert said["warm"] and said["pid"] != process.pid
    assert said["cwd"] == str(tmp_path) and said["argv"] == [str(PROBE), how, what]
    assert said["path0"] == str(PROBE.parent) and said["probe"] == "yes"
    assert said["stdin"] == "from stdin" and process.stderr.read() == "to stderr\n"


def test_a_cold_start_where_the_environment_differs(tmp_path: Path) -> None:
    """A variable the server lacks may change an import (TORCH_LOGS does): the rank
    starts cold."""
    process = _start(tmp_path, "exit", "0", TORCH_LOGS="-dynamo")
    said = _said(process)
    assert process.wait(timeout=60) == 0
    assert not said["warm"] and said["pid"] == process.pid


def test_a_rank_dies_with_the_process_torchrun_started(tmp_path: Path) -> None:
    """SIGKILL (a test's, or torchrun's) to the process in the rank's place kills the rank."""
    process = _start(tmp_path, "sleep", "120")
    rank = _said(process)["pid"]
    process.kill()
    process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{rank}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{rank}").exists()


def _train(directory: Path) -> dict:
    directory.mkdir()
    job = job_file(directory, {})
    assert fsdpspec_run(job).returncode == 0
    return load_file(run_dir(job) / "final" / "model.safetensors")


@pytest.mark.slow
def test_a_job_trains_bit_identically_warm_and_cold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm_ranks: Path | None) -> None:
    if warm_ranks is None:
        pytest.skip("FSDPSPEC_TEST_COLD_RANKS is set")
    forked = warm_ranks.read_text().count(" forked as pid ")
    warm = _train(tmp_path / "warm")
    assert warm_ranks.read_text().count(" forked as pid ") == forked + 2
    monkeypatch.delenv("FSDPSPEC_TEST_WARM_RANKS")
    cold = _train(tmp_path / "cold")
    assert warm.keys() == cold.keys()
    assert all(warm[name].equal(cold[name]) for name in warm)


@pytest.mark.parametrize("args", [
    ["plan", "examples/llama3-8b-h100.yaml"],
    ["validate", "tests/cases/invalid/enum-typo.yaml"]])
def test_a_warm_command_says_what_a_cold_one_says(args: list[str], warm_ranks: Path | None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m fsdpspec validate|plan|…` forks warm too: the same output and status."""
    if warm_ranks is None:
        pytest.skip("FSDPSPEC_TEST_COLD_RANKS is set")
    forked = warm_ranks.read_text().count(" forked as pid ")
    warm = run_cli(*args)
    assert warm_ranks.read_text().count(" forked as pid ") == forked + 1
    monkeypatch.delenv("FSDPSPEC_TEST_WARM_RANKS")
    cold = run_cli(*args)
    assert (warm.returncode, warm.stdout, warm.stderr) == (
        cold.returncode, cold.stdout, cold.stderr)


def test_a_signal_for_a_rank_that_has_ended_is_dropped() -> None:
    """torchrun stops every worker once one fails; a warm rank that already ended (and was
    reaped) must not make its stand-in raise in the signal handler, which fell through to
    running the rank a second time, cold (CI, test_nonfinite: "Error in sitecustomize …
    ProcessLookupError", then a gloo rank that could not connect)."""
    import warm_ranks

    ended = subprocess.Popen([sys.executable, "-c", "pass"], env={})
    ended.wait()
    warm_ranks._relay(ended.pid, signal.SIGTERM)
