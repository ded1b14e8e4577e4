"""Ctrl-C while `fsdpspec run` is still setting up (torch loading, processes starting):
one line, no traceback, and no promise to resume from a checkpoint that does not exist."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytest.importorskip("torch")


@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.0, 6.0])
def test_ctrl_c_during_setup_is_one_line(tmp_path: Path, delay_s: float) -> None:
    run = subprocess.Popen(
        [sys.executable, "-m", "fsdpspec", "run", str(ROOT / "examples" / "quickstart.yaml")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    assert run.stderr is not None
    for line in run.stderr:  # torchrun is being started: torch loads, then the engine
        if line.startswith("starting "):
            break
    time.sleep(delay_s)
    os.killpg(run.pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches the whole group
    out, err = run.communicate(timeout=120)
    assert run.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err
    assert err.splitlines() == ["stopped by SIGINT; no checkpoint was written: `fsdpspec run` "
                                "again starts from step 0"], err
