"""The engine's one fault-injection point, for the crash tests. Production runs never set
these variables, and nothing else in the engine reads them:

- ``FSDPSPEC_TEST_SIGNAL_AT_STEP=<n>``: every rank sends itself SIGTERM as step ``n``
  begins; the real handler runs, the step finishes, a checkpoint is saved at step ``n``
  and the engine exits 0 — at a step a test can rely on.
- ``FSDPSPEC_TEST_KILL_AT_STEP=<n>:<rank>``: that rank dies by SIGKILL as the first module
  forward of step ``n`` returns — mid-step, with the other ranks inside the step's
  collectives — in torchrun's first attempt only, so a restarted group trains on.
- ``FSDPSPEC_TEST_PAUSE_IN_SAVE=<seconds>``: a save sleeps after its shards are written
  and before the rename, so a test can kill a rank mid-save.
- ``FSDPSPEC_TEST_STEP_PAUSE=<seconds>``: every step begins with a sleep, so a test that
  waits for something outside the run (Slurm's time-limit warning) does not spend the
  machine's cores training meanwhile.
"""

from __future__ import annotations

import os
import signal
import time

SIGNAL_AT_STEP_ENV = "FSDPSPEC_TEST_SIGNAL_AT_STEP"
KILL_AT_STEP_ENV = "FSDPSPEC_TEST_KILL_AT_STEP"
PAUSE_IN_SAVE_ENV = "FSDPSPEC_TEST_PAUSE_IN_SAVE"
STEP_PAUSE_ENV = "FSDPSPEC_TEST_STEP_PAUSE"


def at_step_start(step: int) -> None:
    """Fire the step hooks as step ``step`` begins."""
    if step == int(os.environ.get(SIGNAL_AT_STEP_ENV, "0") or 0):
        os.kill(os.getpid(), signal.SIGTERM)
    _kill_in_step(step)
    pause = float(os.environ.get(STEP_PAUSE_ENV, "0") or 0)
    if pause > 0:
        time.sleep(pause)


def _kill_in_step(step: int) -> None:
    wanted = os.environ.get(KILL_AT_STEP_ENV)
    if not wanted or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    kill_step, _, kill_rank = wanted.partition(":")
    if step != int(kill_step) or os.environ.get("RANK", "0") != (kill_rank or "0"):
        return
    from torch.nn.modules.module import register_module_forward_hook

    register_module_forward_hook(lambda *_: os.kill(os.getpid(), signal.SIGKILL))


def in_save() -> None:
    """Pause between writing a checkpoint's shards and publishing it."""
    pause = float(os.environ.get(PAUSE_IN_SAVE_ENV, "0") or 0)
    if pause > 0:
        time.sleep(pause)
