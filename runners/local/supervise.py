"""Run torchrun as a child, its output streaming straight to ours, and pass Ctrl-C on
so the engine checkpoints and stops.

torchrun answers SIGINT/SIGTERM by signalling its workers, waiting 30 s and then killing
them, and exits with a traceback. So the first signal goes to the workers themselves
(torchrun's children): each finishes its step, checkpoints and exits 0, and torchrun
then ends normally. A second Ctrl-C kills the whole process group. A scheduler's
signals (SIGTERM, Slurm's SIGUSR1 warning) are relayed once: Slurm sends SIGTERM to
every process of a job, through srun as well, so repeats are the same request, and
the scheduler kills what is left when its grace period ends.

A stop is all or nothing: the ranks agree on it, so the processes of a node that no
signal reached stop after the same step and checkpoint with the rest. The engine tells
this node's supervisor so (``fsdpspec.runfiles.outcome``), and it exits as a stopped run too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from fsdpspec.runfiles.outcome import STOP_FILE_ENV, stopped_by
from fsdpspec.runfiles.progress import PROGRESS_ENV
from fsdpspec_runners.local.progress_bar import relay

# SIGHUP (the terminal closed) stops the run like SIGTERM: without it the workers, in a
# session of their own, would train on with nobody to stop them. SIGUSR1 is Slurm's
# warning before a time limit. The engine hears SIGINT or SIGTERM.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
_AS_SIGTERM = (signal.SIGHUP, signal.SIGUSR1)


def children(pid: int) -> list[int]:
    """Direct children of a process (Linux /proc); empty when unknown."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(p) for p in task.read_text().split()]
        except (OSError, ValueError):
            continue
    return found


class Stops:
    """The stop signals of one run, from before its child starts to the child's end.
    Installed before the run says it is starting, so that no Ctrl-C is lost in between:
    Python leaves SIGINT ignored in a process started with it ignored (a test runner's
    worker), and otherwise raises KeyboardInterrupt in the middle of the start, after
    which nobody would stop the child in its own session. A signal before there is a
    child means the child is never started; one while it starts is relayed at once."""

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.received: signal.Signals | None = None
        self.relayed = False

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is not None:
            if signum == signal.SIGINT and self.child is not None:  # Ctrl-C again: stop now
                try:
                    os.killpg(self.child.pid, signal.SIGKILL)
                except ProcessLookupError:  # the group ended between the two signals
                    pass
            return
        self.received = signal.Signals(signum)
        if self.child is not None:
            self._relay()

    def start(self, argv: list[str], **popen: object) -> subprocess.Popen | None:
        """Start the child unless a stop came first (then None)."""
        if self.received is not None:
            return None
        # A session of its own: a terminal's Ctrl-C reaches only us, and we relay it once.
        self.child = subprocess.Popen(argv, start_new_session=True, **popen)
        if self.received is not None:  # arrived while Popen ran
            self._relay()
        return self.child

    def _relay(self) -> None:
        """To the child's workers (its children), or to the child before it has any;
        once (a signal landing just after Popen returned is seen by both callers)."""
        assert self.child is not None and self.received is not None
        if self.relayed:
            return
        self.relayed = True
        signum = signal.SIGTERM if self.received in _AS_SIGTERM else self.received
        for pid in children(self.child.pid) or [self.child.pid]:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass


@contextmanager
def stop_signals() -> Iterator[Stops]:
    """Catch the stop signals for the block's duration (see `Stops`)."""
    stops = Stops()
    previous = {sig: signal.signal(sig, stops) for sig in FORWARDED}
    try:
        yield stops
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_supervised(
    argv: Sequence[str], env: dict[str, str], stops: Stops,
    progress_title: str | None = None,
) -> tuple[int, signal.Signals | None]:
    """Run ``argv`` (never through a shell) to completion, its stop signals caught by
    ``stops``. With ``progress_title`` its output is read and shown under a live
    progress bar (for a terminal); without, it goes straight to ours.

    Returns (exit code, the signal that stopped the run: the one forwarded, else the
    one the engine says its ranks agreed on, when a signal reached another node only).
    """
    piped = {}
    if progress_title is not None:
        env = env | {PROGRESS_ENV: "1"}
        piped = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    with tempfile.TemporaryDirectory(prefix="fsdpspec-run-") as private:
        stop_file = Path(private) / "stopped"
        child = stops.start(list(argv), env=env | {STOP_FILE_ENV: str(stop_file)}, **piped)
        if child is None:  # stopped before anything started: nothing to save
            assert stops.received is not None
            return 128 + stops.received.value, stops.received
        if progress_title is not None:
            relay(child.stdout, progress_title)
        code = child.wait()
        stopped = stops.received or stopped_by(stop_file)
    # Popen reports death by signal N as -N; a shell reports it as 128 + N.
    return (128 - code if code < 0 else code), stopped
