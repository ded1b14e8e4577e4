"""Pre-flight checks `fsdpspec run` makes before any process starts.

A job that cannot read its inputs, cannot write its run directory, or has no room on
disk for one checkpoint would otherwise fail minutes later, after every rank has loaded
the model, or — worse — at its first save. Each check reads only: the writability
probe creates one temporary file and removes it at once. The first problem found is
raised as a one-line PreflightError.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from fsdpspec.job.job import Job
from fsdpspec.lint.environment import missing_packages
from fsdpspec.runfiles.datafiles import DataFilesError, data_files
from fsdpspec.spec.v1 import JobSpec
from fsdpspec.validate import FileReport


class PreflightError(ValueError):
    """The job cannot start on this machine; the message is one line."""


def check_before_start(report: FileReport, spec: JobSpec, run_dir: Path) -> None:
    """Raise PreflightError unless the inputs are readable and the run directory is
    writable with room for a checkpoint. ``spec`` has absolute input paths; ``report``
    locates them in the file."""
    for pointer, path, want_dir in _inputs(spec):
        problem = _unreadable(Path(path), want_dir)
        if problem is None and pointer in ("/data/path", "/data/eval/path"):
            problem = _unusable_data(Path(path), spec.data.source)
        if problem:
            raise PreflightError(f"{_where(report, pointer)}: {path} {problem}")
    for pointer, package in missing_packages(spec):
        raise PreflightError(f"{_where(report, pointer)} needs the {package} package, "
                             f"which is not installed (pip install {package})")
    base = _check_writable(run_dir)
    assert report.job is not None
    _check_room(report.job, run_dir, base)


def _where(report: FileReport, pointer: str) -> str:
    """`file:line:col: field` of a spec field, for a one-line error."""
    file, position = report.source_map.locate(pointer)
    return f"{file}:{position.line}:{position.col}: {pointer.strip('/').replace('/', '.')}"


def _inputs(spec: JobSpec) -> list[tuple[str, str, bool]]:
    """(pointer, path, must be a directory) for each input the job will read."""
    # A Hub id stays as written in the resolved spec (fsdpspec.runfiles.resolved): the
    # cache holds it.
    inputs = [(pointer, path, want_dir) for pointer, path, want_dir, hub in spec.input_paths()
              if not hub or Path(path).is_absolute()]
    if spec.checkpoint.resume not in ("auto", "never"):  # relative to where the run starts
        inputs.append(("/checkpoint/resume", spec.checkpoint.resume, True))
    return inputs


def _unusable_data(path: Path, source: str) -> str | None:
    """Why the data files under ``path`` cannot be read (a FIFO, a loop…), or None."""
    try:
        data_files(path, source)
    except DataFilesError as exc:
        return f"holds no usable data: {exc}"
    return None


def _unreadable(path: Path, want_dir: bool) -> str | None:
    """Why ``path`` cannot be read (None when it can): opened for real, since
    permission bits say nothing about root or network mounts."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:  # a symlink loop, a component that is a file…
        return f"cannot be read ({exc.strerror})"
    if want_dir and not stat.S_ISDIR(mode):
        return "is not a directory"
    if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        return "is a FIFO, device or socket, not a regular file"
    try:
        if want_dir:
            return _unreadable_entry(path)
        if path.is_dir():  # a data directory: data_files checks the files it reads
            with os.scandir(path) as entries:
                next(entries, None)
        else:
            # Non-blocking, so a FIFO cannot hang the check.
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return None


def _unreadable_entry(directory: Path) -> str | None:
    """Why a file in an input directory (weights, tokenizer) would hang or fail the
    reader that opens it: a FIFO, a device, a dangling link or a symlink loop."""
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                mode = entry.stat().st_mode
            except OSError as exc:
                return f"holds {entry.name}, which cannot be read ({exc.strerror})"
            if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
                return f"holds {entry.name}, a FIFO, device or socket"
    return None


def _check_writable(run_dir: Path) -> Path:
    """The run directory, or its nearest existing ancestor, after proving a file can be
    created there."""
    base = run_dir
    while not base.exists() and base != base.parent:
        base = base.parent
    if base == run_dir and not base.is_dir():
        raise PreflightError(f"run directory {run_dir} exists and is not a directory")
    if not base.is_dir():
        raise PreflightError(f"run directory {run_dir} cannot be created: {base} is not a "
                             "directory")
    try:
        with tempfile.TemporaryFile(dir=base, prefix=".fsdpspec-probe-"):
            pass
    except OSError as exc:
        raise PreflightError(f"run directory {run_dir} is not writable: cannot create a file "
                             f"in {base} ({exc.strerror})") from None
    return base


def _check_room(job: Job, run_dir: Path, base: Path) -> None:
    from fsdpspec.plan.checkpoint import checkpoint_bytes
    from fsdpspec.plan.memory import GIB

    needed = checkpoint_bytes(job)
    free = shutil.disk_usage(base).free
    if needed is not None and free < needed:
        raise PreflightError(f"run directory {run_dir} has {free / GIB:.1f} GiB free; one "
                             f"checkpoint of this job needs {needed / GIB:.1f} GiB")
