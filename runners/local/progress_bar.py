"""The live progress bar `fsdpspec run` draws on a terminal, fed by the engine's
progress lines (the protocol: `fsdpspec.runfiles.progress`).

Everything else the engine prints passes through above the bar. Without a terminal none
of this happens and the plain log lines go straight to the output.
"""

from __future__ import annotations

from typing import IO, Any

from fsdpspec.runfiles.progress import parse_progress


def _stats(record: dict[str, Any]) -> str:
    return (f"loss {record['loss']:.4f}  tok/s {record['tokens_per_s']:.0f}  "
            f"mfu {record['mfu']:.1%}")


class LiveProgress:
    """A rich progress bar fed with the engine's output lines: step/total, ETA, loss,
    tokens/s, MFU and the last checkpoint. Other lines print above it."""

    def __init__(self, title: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[stats]}"),
            TextColumn("[dim]{task.fields[checkpoint]}"), transient=False,
        )
        self._title = title
        self._task: Any = None

    def __enter__(self) -> LiveProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def feed(self, line: str) -> None:
        """Take one line of the engine's output."""
        record = parse_progress(line)
        if record is None:
            self._progress.console.print(line, markup=False, highlight=False, end="")
        elif record.get("kind") == "start":
            self._start(record["step"], record["total"])
        elif self._task is not None and record.get("kind") == "step":
            self._progress.update(self._task, completed=record["step"], stats=_stats(record))
        elif self._task is not None and record.get("kind") == "checkpoint":
            self._progress.update(self._task, checkpoint=f"ckpt {record['path']}")

    def _start(self, step: int, total: int) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(
            self._title, total=total, completed=step, stats="", checkpoint="")


def relay(stream: IO[bytes], title: str) -> None:
    """Read the engine's output to its end, drawing the bar."""
    with LiveProgress(title) as live:
        for raw in stream:
            live.feed(raw.decode("utf-8", errors="replace"))
