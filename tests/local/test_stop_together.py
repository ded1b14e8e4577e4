"""A stop is all or nothing (docs/clusters.md): torchrun passes a stop signal on to its
workers instead of dying of it (so every node's torchrun ends normally, through its
exit barrier), and `fsdpspec run` on a node that no signal reached still exits as a
stopped run when the engine says its ranks agreed to stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsdpspec.runfiles.outcome import STOP_FILE_ENV
from fsdpspec_runners.local.supervise import run_supervised, stop_signals


@pytest.mark.slow
def test_torchrun_relays_sigterm_to_its_workers_and_ends_normally(tmp_path: Path) -> None:
    started = tmp_path / "started"
    worker = (f'trap \'echo "worker stopped on TERM"; exit 0\' TERM; touch {started}; '
              "while :; do sleep 0.1; done")
    torchrun = subprocess.Popen(
        [sys.executable, "-m", "fsdpspec_runners.local.quiet_torchrun", "--standalone",
         "--nnodes", "1", "--nproc-per-node", "1", "--no-python", "bash", "-c", worker],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline and torchrun.poll() is None
        time.sleep(0.1)
    torchrun.send_signal(signal.SIGTERM)  # torchrun only, as a scheduler's signal reaches it
    output = torchrun.communicate(timeout=30)[0]
    assert torchrun.returncode == 0, output
    assert "worker stopped on TERM" in output and "Traceback" not in output


def test_a_node_no_signal_reached_exits_as_stopped_when_its_ranks_agreed(
        tmp_path: Path) -> None:
    """The engine's local rank 0 names the agreed signal in the node-local file."""
    engine = ("import os, pathlib; "
              f"pathlib.Path(os.environ[{STOP_FILE_ENV!r}]).write_text('SIGTERM\\n')")
    with stop_signals() as stops:
        code, stopped = run_supervised([sys.executable, "-c", engine], {}, stops)
    assert (code, stopped) == (0, signal.SIGTERM)
    with stop_signals() as stops:
        finished = run_supervised([sys.executable, "-c", "pass"], {}, stops)
    assert finished == (0, None)


def test_a_stop_before_the_child_starts_means_it_never_starts(tmp_path: Path) -> None:
    """Ctrl-C between `fsdpspec run` saying "starting" and torchrun's start: caught
    (not lost while SIGINT is ignored, nor a KeyboardInterrupt that orphans the child),
    and nothing starts."""
    started = tmp_path / "started"
    with stop_signals() as stops:
        os.kill(os.getpid(), signal.SIGINT)
        result = run_supervised([sys.executable, "-c", f"open({str(started)!r}, 'w')"], {},
                                stops)
    assert result == (128 + signal.SIGINT, signal.SIGINT)
    assert not started.exists()
