"""Preemption: SIGTERM or SIGINT asks the loop to finish its step, checkpoint and exit 0.

The handler only records the request; the loop agrees on it across ranks once per step
so every rank stops after the same step.

Test hook: ``FSDPSPEC_TEST_SIGNAL_AT_STEP=<n>`` makes every rank send itself SIGTERM as
step ``n`` begins: the real handler runs, the step finishes, a checkpoint is saved at
step ``n`` and the engine exits 0 — at a step a test can rely on.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

SIGNAL_AT_STEP_ENV = "FSDPSPEC_TEST_SIGNAL_AT_STEP"


class StopRequest:
    """Set by SIGTERM / SIGINT; read once per step."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._test_step = int(os.environ.get(SIGNAL_AT_STEP_ENV, "0") or 0)

    def install(self) -> StopRequest:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def at_step_start(self, step: int) -> None:
        """Fire the test hook as its step begins."""
        if self._test_step and step == self._test_step:
            os.kill(os.getpid(), signal.SIGTERM)
