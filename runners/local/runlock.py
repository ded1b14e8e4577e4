"""One `fsdpspec run` per run directory: a lock file in it that names its holder.

The lock is an ``flock`` on ``run_dir/.fsdpspec-run.lock``, held for as long as the
`fsdpspec run` process lives; the file records the holder's pid and host so a second
run can say who holds it. The kernel drops an flock when its holder dies, so a lock file
left behind by a killed run (its pid dead) is stale and simply taken over.

A multi-node job starts one `fsdpspec run` per node on a shared run directory, so its
lock is per node rank: one run of each node of the directory (two node ranks may share a
host). On a filesystem without flock (Lustre mounted without ``-o flock``) the lock
cannot be held and runs are not stopped.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fsdpspec.spec.v1 import JobSpec

LOCK_PREFIX = ".fsdpspec-run"
# flock's answers on filesystems that cannot lock: run unlocked rather than not at all.
_NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)


class RunLockError(ValueError):
    """Another `fsdpspec run` holds the run directory; the message is one line."""


def is_lock_file(path: Path) -> bool:
    """Whether ``path`` is a run lock (the run directory's own bookkeeping)."""
    return path.name.startswith(LOCK_PREFIX) and path.name.endswith(".lock")


def lock_path(spec: JobSpec, run_dir: Path, node_rank: int | None = None) -> Path:
    """The lock file of ``run_dir``: one per directory, or one per node rank for
    multi-node."""
    if spec.resources.nodes == 1:
        return run_dir / f"{LOCK_PREFIX}.lock"
    return run_dir / f"{LOCK_PREFIX}.node{node_rank or 0}.lock"


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says: "pid N" (and the host when not this one)."""
    words = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
    if not words:
        return "an unknown pid"
    pid, host = words[0], words[1] if len(words) > 1 else socket.gethostname()
    return f"pid {pid}" if host == socket.gethostname() else f"pid {pid} on {host}"


def _lock_fd(path: Path) -> int:
    """An open descriptor of ``path`` holding its flock; RunLockError when another
    process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunLockError(f"{path.parent} is in use by another `fsdpspec run` ({holder}): "
                              "wait for it to finish, or stop it") from None
        except OSError as exc:
            if exc.errno in _NO_LOCKS:
                return fd
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        # The holder removed the file between our open and our flock: lock the new one.
        os.close(fd)


def is_held(run_dir: Path) -> bool:
    """Whether an `fsdpspec run` holds ``run_dir`` now (seen from this host)."""
    for path in run_dir.glob(f"{LOCK_PREFIX}*.lock"):
        try:
            # Non-blocking: a FIFO planted under a lock's name must not hang the reader.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:  # removed as its run ended
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue  # not a lock a run made
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:  # no locks on this filesystem: nothing can be said
            continue
        finally:
            os.close(fd)
    return False


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    return missing


@contextmanager
def run_lock(spec: JobSpec, run_dir: Path, node_rank: int | None = None) -> Iterator[None]:
    """Hold the run directory's lock (creating the directory) for the ``with`` body.

    On the way out the lock file goes, and so do the directories made for it when they
    are left empty (a run refused before it wrote anything leaves nothing behind).
    """
    created = _missing_dirs(run_dir)
    path = lock_path(spec, run_dir, node_rank)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = _lock_fd(path)
    except OSError as exc:  # pre-flight proved the directory writable; it changed since
        _remove_empty(created)
        raise RunLockError(f"cannot lock {path}: {exc.strerror or exc}") from None
    except RunLockError:
        _remove_empty(created)
        raise
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)
        _remove_empty(created)


def _remove_empty(directories: list[Path]) -> None:
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:  # not empty: the run wrote into it
            return
