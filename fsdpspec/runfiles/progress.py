"""The line protocol the engine feeds `fsdpspec run`'s live progress bar
(`fsdpspec_runners.local.progress_bar`).

With ``FSDPSPEC_PROGRESS=1`` in its environment (set only when `fsdpspec run` is on a
terminal and reads the engine's output), the engine's rank 0 prints each metrics record
and checkpoint as one ``fsdpspec-progress {json}`` line instead of its plain step line.
"""

from __future__ import annotations

import json
from typing import Any

PROGRESS_ENV = "FSDPSPEC_PROGRESS"
_PREFIX = "fsdpspec-progress "


def progress_line(record: dict[str, Any]) -> str:
    """One progress record as a line of output."""
    return _PREFIX + json.dumps(record)


def parse_progress(line: str) -> dict[str, Any] | None:
    """The record of a progress line; None for any other line."""
    if not line.startswith(_PREFIX):
        return None
    try:
        record = json.loads(line[len(_PREFIX):])
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
