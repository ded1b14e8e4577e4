"""run_dir/events.jsonl: the run's history beside its metrics — each start (fresh or
resumed, and from which step), each checkpoint, and how each launch ended. The engine's
rank 0 writes what it knows; `fsdpspec run` adds the launch's exit status, which a
killed engine cannot. `fsdpspec report` reads it to mark resumes and say the status."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from fsdpspec.job.rundir import EVENTS
from fsdpspec.jsonfile import Limits, RecordError, load_jsonl

FILENAME = EVENTS


def append_event(run_dir: Path, event: str, **fields: Any) -> None:
    """Append one record; a single short write, so a kill cannot tear earlier lines."""
    record = {"event": event, "time": round(time.time(), 3), **fields}
    with open_for_append(run_dir / FILENAME) as fh:
        fh.write(json.dumps(record) + "\n")


def open_for_append(path: Path) -> TextIO:
    """``path`` opened to append text, created if missing; OSError (one line) unless it
    is a regular file: opened non-blocking, so a FIFO planted there cannot hang the run,
    and never through a symlink."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW,
                 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file; refusing to write it", str(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


# What a run directory's records may hold; anything else is a file fsdpspec did not
# write (or one tampered with), refused by name and line rather than drawn.
MAX_STEP = 10**12
MAX_MAGNITUDE = 1e30  # far above any loss, rate or byte count a run logs
RUN_LIMITS = Limits(max_bytes=256 << 20, max_depth=4, max_string=4096, nonfinite=True)
_EVENTS = {"start", "checkpoint", "end", "exit"}
_INT_FIELDS = {"step", "max_steps", "world_size", "code", "tokens"}


def _value_problem(key: str, value: Any) -> str | None:
    if key == "step" or key in _INT_FIELDS:
        if value is None and key != "step":
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_STEP:
            return f"{key} must be an integer from 0 to {MAX_STEP}"
        return None
    if value is None or isinstance(value, (bool, str)):
        return None
    if isinstance(value, (int, float)):
        # NaN and infinities are what a non-finite step logs; huge finite values are not.
        if math.isfinite(value) and abs(value) > MAX_MAGNITUDE:
            return f"{key} is out of range"
        return None
    return f"{key} must be a number, a string, true/false or null"


def _checked(record: dict[str, Any], where: str, kind: str) -> dict[str, Any]:
    event = record.get("event")
    if kind == "events" and (not isinstance(event, str) or event not in _EVENTS):
        raise RecordError(f"{where}: event must be one of {', '.join(sorted(_EVENTS))}")
    # Every checkpoint the engine records has its step; the report names it.
    named = "metrics" if kind == "metrics" else event
    if "step" not in record and named in ("metrics", "checkpoint"):
        raise RecordError(f"{where}: a {named} record has no step")
    for key, value in record.items():
        problem = _value_problem(key, value)
        if problem:
            raise RecordError(f"{where}: {problem}")
    return record


def iter_records(path: Path, kind: str) -> Iterator[dict[str, Any]]:
    """The records of a run's metrics.jsonl or events.jsonl (``kind``) as a stream, each
    checked for its shape; a line torn by a kill is skipped; none when the file is
    absent. Anything else is a JsonFileError naming the file and line."""
    if not os.path.lexists(path):
        return
    for number, record in load_jsonl(path, RUN_LIMITS):
        yield _checked(record, f"{path}:{number}", kind)


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """The run's events, oldest first."""
    return list(iter_records(run_dir / FILENAME, "events"))
