"""How a node's training ended, told by the engine to that node's `fsdpspec run`.

A stop is agreed over every rank (see ``engine.signals``), so the ranks of a node that
no signal reached stop too, cleanly and with exit code 0, which keeps torchrun on its
success path (no restart; every node's torchrun meets at its exit barrier). Their
`fsdpspec run` must still exit as a stopped run, not a finished one, or a scheduler
would call the job done: Kubernetes marks a PyTorchJob succeeded when its Master pod
exits 0. So the engine's local rank 0 writes the name of the agreed signal into the
node-local file that `fsdpspec run` names in ``FSDPSPEC_STOP_FILE``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

STOP_FILE_ENV = "FSDPSPEC_STOP_FILE"


def tell_stopped(signal_name: str) -> None:
    """Engine side: record that the run stopped, on ``signal_name`` (where a launcher
    asked to be told)."""
    path = os.environ.get(STOP_FILE_ENV)
    if path:
        Path(path).write_text(signal_name + "\n", encoding="utf-8")


def stopped_by(path: Path) -> signal.Signals | None:
    """Launcher side: the signal the engine said the run stopped on, if it said so."""
    try:
        name = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return signal.Signals[name] if name in signal.Signals.__members__ else None
