"""Preemption: SIGTERM, SIGINT or SIGUSR1 (Slurm's warning before a time limit, which
srun delivers to every process of the step) asks the loop to finish its step,
checkpoint and exit 0.

The handler only records the request; the loop agrees on it across ranks once per step
so every rank stops after the same step, whichever rank or node the signal reached: a
stop is all or nothing.
"""

from __future__ import annotations

import signal
from types import FrameType


class StopRequest:
    """Set by SIGTERM / SIGINT / SIGUSR1; read once per step."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def install(self) -> StopRequest:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    @property
    def signum(self) -> int:
        """The signal's number; 0 when none came."""
        return signal.Signals[self.signal_name].value if self.signal_name else 0
