"""The crash tests' fault-injection settings, as `fsdpspec run` hands them to the engine
in its environment (the one reader both use: `fsdpspec run` refuses a bad one before
anything starts, and the engine, however launched, reads them only through here).
Production runs never set them. Total: every value is read strictly and bounded, and
anything else is a FaultSettingError of one line naming the variable.

- ``FSDPSPEC_TEST_SIGNAL_AT_STEP=<n>``: every rank sends itself SIGTERM as step ``n``
  begins; the real handler runs, the step finishes, a checkpoint is saved at step ``n``
  and the engine exits 0 — at a step a test can rely on.
- ``FSDPSPEC_TEST_KILL_AT_STEP=<n>[:<rank>]``: that rank (0 by default) dies by SIGKILL
  as the first module forward of step ``n`` returns — mid-step, with the other ranks
  inside the step's collectives — in torchrun's first attempt only.
- ``FSDPSPEC_TEST_PAUSE_IN_SAVE=<seconds>``: a save sleeps after its shards are written
  and before the rename, so a test can kill a rank mid-save.
- ``FSDPSPEC_TEST_STEP_PAUSE=<seconds>``: every step begins with a sleep, so a test that
  waits for something outside the run (Slurm's time-limit warning) does not spend the
  machine's cores training meanwhile.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

SIGNAL_AT_STEP_ENV = "FSDPSPEC_TEST_SIGNAL_AT_STEP"
KILL_AT_STEP_ENV = "FSDPSPEC_TEST_KILL_AT_STEP"
PAUSE_IN_SAVE_ENV = "FSDPSPEC_TEST_PAUSE_IN_SAVE"
STEP_PAUSE_ENV = "FSDPSPEC_TEST_STEP_PAUSE"
# A pause is for a test to act in; longer would be a hang.
MAX_PAUSE_S = 60.0
_MAX_DIGITS = 9  # a step or a rank


class FaultSettingError(ValueError):
    """A fault-injection variable whose value is not one the tests write; one line."""


@dataclass(frozen=True)
class Faults:
    """The faults to inject (0 or None: none)."""

    signal_at_step: int = 0
    kill_at_step: tuple[int, int] | None = None  # (step, rank)
    pause_in_save_s: float = 0.0
    step_pause_s: float = 0.0


def _refused(name: str, value: str, expected: str) -> FaultSettingError:
    shown = value if len(value) <= 40 and value.isprintable() else repr(value[:40])
    return FaultSettingError(f"{name}={shown}: expected {expected} (a test-only setting; "
                             "unset it)")


def _count(name: str, value: str, text: str, expected: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS):
        raise _refused(name, value, expected)
    return int(text)


def _seconds(name: str, value: str) -> float:
    expected = f"seconds from 0 to {MAX_PAUSE_S:g}"
    try:
        seconds = float(value)
    except ValueError:
        raise _refused(name, value, expected) from None
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_PAUSE_S):
        raise _refused(name, value, expected)
    return seconds


def read_faults(env: Mapping[str, str]) -> Faults:
    """The faults ``env`` asks for; FaultSettingError for a value that is not one."""
    signal_at = env.get(SIGNAL_AT_STEP_ENV, "")
    kill = env.get(KILL_AT_STEP_ENV, "")
    kill_at = None
    if kill:
        step, _, rank = kill.partition(":")
        expected = "STEP or STEP:RANK (integers)"
        kill_at = (_count(KILL_AT_STEP_ENV, kill, step, expected),
                   _count(KILL_AT_STEP_ENV, kill, rank or "0", expected))
    pause_in_save = env.get(PAUSE_IN_SAVE_ENV, "")
    step_pause = env.get(STEP_PAUSE_ENV, "")
    return Faults(
        signal_at_step=_count(SIGNAL_AT_STEP_ENV, signal_at, signal_at, "a step (an integer)")
        if signal_at else 0,
        kill_at_step=kill_at,
        pause_in_save_s=_seconds(PAUSE_IN_SAVE_ENV, pause_in_save) if pause_in_save else 0.0,
        step_pause_s=_seconds(STEP_PAUSE_ENV, step_pause) if step_pause else 0.0)
