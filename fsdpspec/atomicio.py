"""The one way fsdpspec writes a file or publishes a directory: whole or not at all.

A file is written to a temp file in the same directory, fsynced, renamed over the
target, and the directory is fsynced so that the rename survives a power cut. A target
that exists must be a regular file: a FIFO, a device node, a directory or a symlink is
refused rather than replaced (``-o /dev/sda`` must never become a regular file).
Torch-free: the CLI, the runners and the engine all use it.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path


class NotARegularFile(OSError):
    """The target exists and is not a regular file; nothing was written."""

    def __init__(self, path: Path, kind: str):
        super().__init__(errno.EEXIST, f"it is {kind}, not a regular file; refusing to "
                         "replace it", str(path))


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def check_target(path: Path) -> None:
    """Raise NotARegularFile unless ``path`` is a new name or a regular file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise NotARegularFile(path, _kind(mode))


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (a rename into it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_bytes(path: Path, data: bytes, *, executable: bool = False) -> None:
    """Replace (or create) the regular file ``path`` with ``data``, atomically."""
    path = Path(path)
    check_target(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, (0o777 if executable else 0o666) & ~_umask())
        check_target(path)  # it may have been swapped for a FIFO or a link meanwhile
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_text(path: Path, text: str, *, executable: bool = False) -> None:
    """write_bytes for UTF-8 text."""
    write_bytes(path, text.encode("utf-8"), executable=executable)


def publish_dir(tmp: Path, target: Path) -> None:
    """Rename the finished directory ``tmp`` to ``target``. An old ``target`` is moved
    aside first and deleted only once the new one is in place."""
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise OSError(errno.ENOTDIR, "it exists and is not a directory; refusing to "
                      "replace it", str(target))
    trash = target.with_name(f".trash-{target.name}")
    shutil.rmtree(trash, ignore_errors=True)
    if target.exists():
        os.replace(target, trash)
    os.replace(tmp, target)
    fsync_dir(target.parent)
    shutil.rmtree(trash, ignore_errors=True)
