"""What a run directory says about its run: the resolved spec, the metrics, the events
(starts, resumes, checkpoints, ends) and from them the status. Only reads files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdpspec.job.rundir import RunDir
from fsdpspec.jsonfile import JsonFileError
from fsdpspec.runfiles.events import read_events, read_jsonl
from fsdpspec.runfiles.resolved import FILENAME, read_resolved_spec
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.local.runlock import is_held


class RunDataError(ValueError):
    """The directory is not a readable run directory; the message is one line."""


@dataclass(frozen=True)
class Status:
    """``state`` is one of finished, running, stopped, failed, interrupted, not started."""

    state: str
    detail: str


@dataclass(frozen=True)
class RunData:
    run_dir: Path
    spec: JobSpec
    document: dict[str, Any]
    metrics: list[dict[str, Any]]
    events: list[dict[str, Any]]
    status: Status

    @property
    def last_step(self) -> int:
        return last_step(self.metrics, self.events)

    @property
    def resumes(self) -> list[int]:
        """The steps each resumed launch started from."""
        return [e["step"] for e in self.events
                if e.get("event") == "start" and e.get("step", 0) > 0]

    @property
    def last_checkpoint(self) -> dict[str, Any] | None:
        saved = [e for e in self.events if e.get("event") == "checkpoint"]
        return saved[-1] if saved else None


def last_step(metrics: list[dict[str, Any]], events: list[dict[str, Any]]) -> int:
    """The furthest step any record reached."""
    steps = [r["step"] for r in [*metrics, *events] if isinstance(r.get("step"), int)]
    return max(steps, default=0)


def _ending(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How the last launch ended: its engine's end record, else its exit record."""
    starts = [i for i, e in enumerate(events) if e.get("event") == "start"]
    last_launch = events[starts[-1]:] if starts else events
    for kind in ("end", "exit"):
        found = [e for e in last_launch if e.get("event") == kind]
        if found:
            return found[-1]
    return None


def run_status(run_dir: Path, events: list[dict[str, Any]], step: int,
               max_steps: int) -> Status:
    """The run's state, from its lock (running) and its last launch's records."""
    progress = f"step {step} of {max_steps}"
    if is_held(run_dir):
        return Status("running", f"{progress}; build the report again to refresh")
    ending = _ending(events)
    if ending is None:
        if not events:
            return Status("not started", "no launch recorded")
        return Status("interrupted", f"{progress}; the launch ended without a record")
    outcome = ending.get("outcome")
    if outcome == "finished" or (ending.get("event") == "exit" and ending.get("code") == 0
                                 and step >= max_steps):
        return Status("finished", progress)
    if outcome == "stopped" or ending.get("signal"):
        return Status("stopped", f"{progress}; `fsdpspec run` again resumes")
    message = ending.get("message") or f"exit code {ending.get('code')}"
    return Status("failed", f"{progress}: {message}")


def read_run(run_dir: Path) -> RunData:
    """Everything the report shows about ``run_dir``."""
    path = run_dir / FILENAME
    if not os.path.lexists(path):
        raise RunDataError(f"{run_dir}: not a run directory (no {FILENAME})")
    try:
        spec, _, document = read_resolved_spec(path)
        metrics = read_jsonl(RunDir(run_dir).metrics, "metrics")
        events = read_events(run_dir)
    except JsonFileError as exc:
        raise RunDataError(exc.coded()) from None
    status = run_status(run_dir, events, last_step(metrics, events), spec.train.max_steps)
    return RunData(run_dir, spec, document, metrics, events, status)
