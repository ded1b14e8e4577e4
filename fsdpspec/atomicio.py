"""The one way fsdpspec writes a file or publishes a directory: whole or not at all.

A file is written to a temp file in the same directory (``tempfile``: an unpredictable
name, created with O_EXCL, so a planted symlink is never followed), fsynced, renamed over
the target, and the directory is fsynced so that the rename survives a power cut. A
directory is built under a temp name the same way and renamed into place. A target that
exists must be of the kind written (a regular file, or a directory) and never a symlink:
a FIFO, a device node or a link is refused rather than replaced (``-o /dev/sda`` must
never become a regular file). With ``replace=False`` an existing target is refused
(`--force` is how a user says otherwise). Nothing is deleted that this module did not
create: only its own temp files, and a replaced target once the new one is in place.
Torch-free: the CLI, the runners and the engine all use it.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class NotARegularFile(OSError):
    """The target exists and is not of the kind written; nothing was written."""

    def __init__(self, path: Path, kind: str, wanted: str = "a regular file"):
        super().__init__(errno.EEXIST, f"it is {kind}, not {wanted}; refusing to "
                         "replace it", str(path))


class OutputExists(FileExistsError):
    """The target exists and replacing it was not asked for; nothing was written."""

    def __init__(self, path: Path):
        super().__init__(errno.EEXIST, "it exists; pass --force to replace it", str(path))


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"),
             (stat.S_ISREG, "a regular file"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def check_target(path: Path, *, replace: bool = True, directory: bool = False) -> bool:
    """Whether ``path`` exists; raise NotARegularFile unless it is a new name or of the
    kind written (never a symlink), OutputExists if it exists and ``replace`` is false."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    wanted = stat.S_ISDIR if directory else stat.S_ISREG
    if not wanted(mode):
        raise NotARegularFile(path, _kind(mode), "a directory" if directory else
                              "a regular file")
    if not replace:
        raise OutputExists(path)
    return True


def _temp_prefix(name: str, lead: str = ".") -> str:
    """A temp name's prefix beside ``name``: at most 100 bytes of it, so that a name of
    the longest length a file may have (255 bytes) still has room for the temp's own
    random part and suffix."""
    short = name.encode("utf-8", "surrogateescape")[:100].decode("utf-8", "ignore")
    return f"{lead}{short}."


def describe_error(exc: OSError) -> str:
    """One line for a failed write: the reason, without the errno prefix."""
    return exc.strerror or str(exc)


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


def _named(path: Path) -> Path:
    """``path`` with a name a file can take (``.``, ``..`` and ``/`` have none)."""
    path = Path(os.path.abspath(path))
    if path.name in ("", ".", ".."):
        raise IsADirectoryError(errno.EISDIR, "it names a directory, not a file", str(path))
    return path


def write_bytes(path: Path, data: bytes, *, executable: bool = False,
                replace: bool = True) -> None:
    """Replace (or create) the regular file ``path`` with ``data``, atomically; with
    ``replace=False`` an existing ``path`` is refused (OutputExists), even one that
    appears while writing."""
    path = _named(path)
    check_target(path, replace=replace)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, (0o777 if executable else 0o666) & ~_umask())
        check_target(path, replace=replace)  # it may have been swapped meanwhile
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # never replaces: fails if the name appeared
            except FileExistsError:
                raise OutputExists(path) from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    fsync_dir(path.parent)


def write_text(path: Path, text: str, *, executable: bool = False,
               replace: bool = True) -> None:
    """write_bytes for UTF-8 text."""
    write_bytes(path, text.encode("utf-8"), executable=executable, replace=replace)


@contextmanager
def building_dir(target: Path, *, replace: bool = False) -> Iterator[Path]:
    """A new empty temp directory beside ``target`` to fill; published as ``target``
    when the block ends, removed (only it) when the block raises. ``target`` is checked
    first: an existing one must be a directory, and ``replace`` true."""
    target = _named(target)
    check_target(target, replace=replace, directory=True)
    if Path.cwd().is_relative_to(target):
        raise OSError(errno.EINVAL, "it holds the working directory; refusing to replace it",
                      str(target))
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(target.name), suffix=".tmp",
                                dir=target.parent))
    try:
        yield tmp
        publish_dir(tmp, target, replace=replace)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish_dir(tmp: Path, target: Path, *, replace: bool = True) -> None:
    """Rename the finished directory ``tmp`` to ``target``. An old ``target`` (a
    directory, never a symlink; only with ``replace``) is moved aside under a temp name
    first and deleted only once the new one is in place."""
    exists = check_target(target, replace=replace, directory=True)
    if Path(os.path.abspath(tmp)).is_relative_to(os.path.abspath(target)):
        raise OSError(errno.EINVAL, "it holds the directory being written; refusing to "
                      "replace it", str(target))
    trash = None
    if exists:
        trash = Path(tempfile.mkdtemp(prefix=_temp_prefix(target.name, ".trash-"),
                                      dir=target.parent))
        os.replace(target, trash)  # over the empty placeholder mkdtemp made
    try:
        os.rename(tmp, target)  # Linux renames over an empty directory only
    except OSError:
        if trash is not None:
            os.replace(trash, target)
        raise
    fsync_dir(target.parent)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)
