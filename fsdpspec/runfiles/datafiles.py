"""The files a text or jsonl source reads, found the same way by the pre-flight check
and by the engine. Only regular files are data: a FIFO would block the reader forever,
a device would never end, and a symlink loop has no file behind it."""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path

# The files each source reads; a `dataset` directory's files are whichever of these
# `datasets` finds (its split files, or the arrow and json files of save_to_disk).
PATTERNS = {"text": ("*.txt",), "jsonl": ("*.jsonl",),
            "dataset": ("*.jsonl", "*.json", "*.parquet", "*.arrow")}


class DataFilesError(ValueError):
    """data.path cannot be read as data; the message is one line."""


def _kind(mode: int) -> str | None:
    """Why a file of this mode is not data (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a device or socket"


def _regular(path: Path) -> Path:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:  # a dangling link or a symlink loop
        raise DataFilesError(f"{path} cannot be read ({exc.strerror})") from None
    kind = _kind(mode)
    if kind is not None:
        raise DataFilesError(f"{path} is {kind}, not a regular file")
    return path


def data_files(path: Path, source: str) -> list[Path]:
    """The source's files under ``path`` (itself, or a directory searched recursively
    without following symlinked directories), sorted; each one a regular file."""
    patterns = PATTERNS[source]
    if not path.is_dir():
        return [_regular(path)]
    found = []
    for folder, _dirs, names in os.walk(path):
        found += [Path(folder) / n for n in names
                  if any(fnmatch.fnmatchcase(n, pattern) for pattern in patterns)]
    if not found:
        raise DataFilesError(f"no {' or '.join(patterns)} file at {path}")
    return [_regular(p) for p in sorted(found)]
