"""What a run directory says about its run: the resolved spec, the metrics, the events
(starts, resumes, checkpoints, ends) and from them the status. Only reads files."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdpspec.job.rundir import RunDir
from fsdpspec.jsonfile import JsonFileError
from fsdpspec.runfiles.events import iter_records
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


# Points a curve keeps, and resumes a report marks: a 6-inch chart resolves no more,
# and memory stays bounded however many records a run directory holds.
MAX_POINTS = 1000
MAX_RESUMES = 100


class Curve:
    """One metric's (step, value) points as they stream in, thinned to at most
    2·MAX_POINTS: every ``stride``-th point is kept, and when the list fills every other
    one is dropped and the stride doubles, so the kept points stay evenly spread. The
    last point and the largest value are kept besides."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.values: list[float] = []
        self.stride, self.seen = 1, 0
        self.last: tuple[int, float] | None = None
        self.peak: float | None = None

    def add(self, step: int, value: float) -> None:
        if self.seen % self.stride == 0:
            self.steps.append(step)
            self.values.append(value)
            if len(self.steps) > 2 * MAX_POINTS:
                self.steps, self.values = self.steps[::2], self.values[::2]
                self.stride *= 2
        self.seen += 1
        self.last = (step, value)
        if not math.isnan(value) and (self.peak is None or value > self.peak):
            self.peak = value

    def points(self) -> tuple[list[int], list[float]]:
        """The kept points, the last one included (kept indices are the multiples of
        the stride: the last one seen was kept when it is one)."""
        if self.last is not None and (self.seen - 1) % self.stride:
            return [*self.steps, self.last[0]], [*self.values, self.last[1]]
        return list(self.steps), list(self.values)


@dataclass
class Metrics:
    """What metrics.jsonl says, folded as it streams: a curve per drawn key."""

    curves: dict[str, Curve]
    records: int = 0
    last_step: int = 0

    def add(self, record: dict[str, Any]) -> None:
        self.records += 1
        step = record["step"]
        self.last_step = max(self.last_step, step)
        for key, value in record.items():  # a record holds few keys, the curves more
            curve = self.curves.get(key)
            if curve is not None and isinstance(value, (int, float)) \
                    and not isinstance(value, bool):
                curve.add(step, value)

    def peak(self, key: str) -> float | None:
        curve = self.curves.get(key)
        return curve.peak if curve else None


@dataclass
class History:
    """What events.jsonl says, folded as it streams: the resumes (the latest
    MAX_RESUMES of them, and how many), the last checkpoint, how the last launch ended."""

    records: int = 0
    last_step: int = 0
    resumes: list[int] = field(default_factory=list)
    resume_count: int = 0
    last_checkpoint: dict[str, Any] | None = None
    ended: dict[str, Any] | None = None  # the last launch's engine end record
    exited: dict[str, Any] | None = None  # and its exit record

    def add(self, event: dict[str, Any]) -> None:
        self.records += 1
        kind, step = event["event"], event.get("step")
        if isinstance(step, int):
            self.last_step = max(self.last_step, step)
        if kind == "start":
            self.ended = self.exited = None
            if isinstance(step, int) and step > 0:
                self.resume_count += 1
                self.resumes = [*self.resumes[-(MAX_RESUMES - 1):], step]
        elif kind == "checkpoint":
            self.last_checkpoint = event
        elif kind == "end":
            self.ended = event
        elif kind == "exit":
            self.exited = event

    @property
    def ending(self) -> dict[str, Any] | None:
        """How the last launch ended: its engine's end record, else its exit record."""
        return self.ended or self.exited


def history(events: Iterable[dict[str, Any]]) -> History:
    """The events (oldest first) folded into their History."""
    folded = History()
    for event in events:
        folded.add(event)
    return folded


@dataclass(frozen=True)
class RunData:
    run_dir: Path
    spec: JobSpec
    document: dict[str, Any]
    metrics: Metrics
    history: History
    status: Status

    @property
    def last_step(self) -> int:
        """The furthest step any record reached."""
        return max(self.metrics.last_step, self.history.last_step)


def run_status(run_dir: Path, events: History, step: int, max_steps: int) -> Status:
    """The run's state, from its lock (running) and its last launch's records."""
    progress = f"step {step} of {max_steps}"
    if is_held(run_dir):
        return Status("running", f"{progress}; build the report again to refresh")
    ending = events.ending
    if ending is None:
        if not events.records:
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


def read_run(run_dir: Path, keys: Iterable[str] = ()) -> RunData:
    """Everything the report shows about ``run_dir``, with a curve of each metric in
    ``keys``; the records are streamed, so memory does not grow with their number."""
    path = run_dir / FILENAME
    if not os.path.lexists(path):
        raise RunDataError(f"{run_dir}: not a run directory (no {FILENAME})")
    metrics = Metrics({key: Curve() for key in keys})
    try:
        spec, _, document = read_resolved_spec(path)
        for record in iter_records(RunDir(run_dir).metrics, "metrics"):
            metrics.add(record)
        events = history(iter_records(RunDir(run_dir).events, "events"))
    except JsonFileError as exc:
        raise RunDataError(exc.coded()) from None
    status = run_status(run_dir, events, max(metrics.last_step, events.last_step),
                        spec.train.max_steps)
    return RunData(run_dir, spec, document, metrics, events, status)
