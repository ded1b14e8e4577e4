"""Ctrl-C while `fsdpspec run` is still setting up (torch loading, processes starting):
one line, no traceback, and no promise to resume from a checkpoint that does not exist."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytest.importorskip("torch")


def _interrupt(tmp_path: Path, wait_for: str) -> tuple[int, str, str]:
    """Start the quickstart, send Ctrl-C once ``wait_for`` starts a line of its output."""
    run = subprocess.Popen(
        [sys.executable, "-m", "fsdpspec", "run", str(ROOT / "examples" / "quickstart.yaml")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    assert run.stdout is not None
    seen = []
    for line in run.stdout:
        seen.append(line)
        if line.startswith(wait_for):
            break
    os.killpg(run.pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches the whole group
    rest = run.communicate(timeout=120)[0]
    return run.returncode, "".join(seen), rest


@pytest.mark.slow
@pytest.mark.parametrize("wait_for", ["starting ", "fsdp2 "])  # torch loading; model built
def test_ctrl_c_during_setup_is_one_line(tmp_path: Path, wait_for: str) -> None:
    code, _, rest = _interrupt(tmp_path, wait_for)
    assert code == 128 + signal.SIGINT, rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest
    lines = [line for line in rest.splitlines() if not line.startswith(("step ", "fsdp2 "))]
    latest = tmp_path / "runs" / "quickstart" / "checkpoints" / "latest"
    if latest.exists():  # the engine was already training: it saved, and says where
        expected = f"`fsdpspec run` again resumes from checkpoint {latest.read_text().strip()}"
        assert lines[-1] == f"stopped by SIGINT; {expected}", rest
    else:  # never "resumes from the last checkpoint" when there is none
        assert lines == ["stopped by SIGINT; no checkpoint was written: `fsdpspec run` again "
                         "starts from step 0"], rest
