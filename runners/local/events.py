"""run_dir/events.jsonl: the run's history beside its metrics — each start (fresh or
resumed, and from which step), each checkpoint, and how each launch ended. The engine's
rank 0 writes what it knows; `fsdpspec run` adds the launch's exit status, which a
killed engine cannot. `fsdpspec report` reads it to mark resumes and say the status."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fsdpspec.job.rundir import EVENTS

FILENAME = EVENTS


def append_event(run_dir: Path, event: str, **fields: Any) -> None:
    """Append one record; a single short write, so a kill cannot tear earlier lines."""
    record = {"event": event, "time": round(time.time(), 3), **fields}
    with open(run_dir / FILENAME, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a .jsonl file, skipping a line torn by a kill; [] when absent."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """The run's events, oldest first."""
    return read_jsonl(run_dir / FILENAME)
