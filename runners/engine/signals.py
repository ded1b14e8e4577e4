"""Preemption: SIGTERM, SIGINT or SIGUSR1 (Slurm's warning before a time limit, which
srun delivers to every process of the step) asks the loop to finish its step,
checkpoint and exit 0.

The handler only records the request; the loop agrees on it across ranks once per step
so every rank stops after the same step.

Test hook: ``FSDPSPEC_TEST_SIGNAL_AT_STEP=<n>`` makes every rank send itself SIGTERM as
step ``n`` begins: the real handler runs, the step finishes, a checkpoint is saved at
step ``n`` and the engine exits 0 — at a step a test can rely on.

Test hook: ``FSDPSPEC_TEST_KILL_AT_STEP=<n>:<rank>`` makes that rank SIGKILL itself in
the middle of step ``n`` (see ``kill_in_step_for_test``), in torchrun's first attempt only.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

SIGNAL_AT_STEP_ENV = "FSDPSPEC_TEST_SIGNAL_AT_STEP"
KILL_AT_STEP_ENV = "FSDPSPEC_TEST_KILL_AT_STEP"


class StopRequest:
    """Set by SIGTERM / SIGINT / SIGUSR1; read once per step."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._test_step = int(os.environ.get(SIGNAL_AT_STEP_ENV, "0") or 0)

    def install(self) -> StopRequest:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def at_step_start(self, step: int) -> None:
        """Fire the test hooks as their step begins."""
        if self._test_step and step == self._test_step:
            os.kill(os.getpid(), signal.SIGTERM)
        kill_in_step_for_test(step)


def kill_in_step_for_test(step: int) -> None:
    """Test hook for crash tests: with ``FSDPSPEC_TEST_KILL_AT_STEP=<n>:<rank>``, that rank
    dies by SIGKILL as the first module forward of step ``n`` returns — mid-step, with the
    other ranks inside the step's collectives. Only in torchrun's first attempt
    (``TORCHELASTIC_RESTART_COUNT`` 0 or unset), so a restarted group trains on."""
    wanted = os.environ.get(KILL_AT_STEP_ENV)
    if not wanted or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    kill_step, _, kill_rank = wanted.partition(":")
    if step != int(kill_step) or os.environ.get("RANK", "0") != (kill_rank or "0"):
        return
    from torch.nn.modules.module import register_module_forward_hook

    register_module_forward_hook(lambda *_: os.kill(os.getpid(), signal.SIGKILL))
