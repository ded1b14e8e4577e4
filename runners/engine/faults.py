"""The engine's one fault-injection point, for the crash tests: the settings of
`fsdpspec.runfiles.fault_settings` (read once, strictly, at the engine's start: a bad value is
one line, never a traceback mid-run). Production runs never set them, and nothing else
in the engine reads them."""

from __future__ import annotations

import functools
import os
import signal
import time

from fsdpspec.runfiles.fault_settings import Faults, FaultSettingError, read_faults
from fsdpspec_runners.engine.errors import EngineError


@functools.cache
def injected() -> Faults:
    """The faults this process's environment asks for; EngineError for a bad value."""
    try:
        return read_faults(os.environ)
    except FaultSettingError as exc:
        raise EngineError(str(exc)) from None


def at_step_start(step: int) -> None:
    """Fire the step hooks as step ``step`` begins."""
    faults = injected()
    if step == faults.signal_at_step:
        os.kill(os.getpid(), signal.SIGTERM)
    _kill_in_step(step, faults)
    if faults.step_pause_s > 0:
        time.sleep(faults.step_pause_s)


def _kill_in_step(step: int, faults: Faults) -> None:
    if faults.kill_at_step is None or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    kill_step, kill_rank = faults.kill_at_step
    if step != kill_step or os.environ.get("RANK", "0") != str(kill_rank):
        return
    from torch.nn.modules.module import register_module_forward_hook

    register_module_forward_hook(lambda *_: os.kill(os.getpid(), signal.SIGKILL))


def in_save() -> None:
    """Pause between writing a checkpoint's shards and publishing it."""
    if injected().pause_in_save_s > 0:
        time.sleep(injected().pause_in_save_s)
