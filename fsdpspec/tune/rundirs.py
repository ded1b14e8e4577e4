"""The directories `tune --measure` trains in (``candidate-N``, ``calibration-run``
under ``runs/<job>-tune``): each made by tune itself and recorded in the folder's
``made-by-tune.json``; only a recorded one is ever removed, never through a symlink.
An entry of that name that tune did not make (a planted link, a user's directory) is
refused before anything trains."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from fsdpspec.atomicio import write_text
from fsdpspec.jsonfile import JsonFileError, Limits, load_object

RECORD = "made-by-tune.json"
_RECORD_LIMITS = Limits(max_bytes=64 << 10, max_depth=3, max_string=256)


class NotMadeByTune(Exception):
    """A directory tune would train in exists and is not one it made; one line."""


def _recorded(folder: Path) -> set[str]:
    """The names tune recorded as made in ``folder`` (none when it has no record)."""
    if not os.path.lexists(folder / RECORD):
        return set()
    try:
        names = load_object(folder / RECORD, _RECORD_LIMITS).get("made")
    except JsonFileError as exc:
        raise NotMadeByTune(f"{exc}; remove it to start over") from None
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _ours(folder: Path, name: str) -> bool:
    """Whether ``folder/name`` is absent (False) or a directory tune made (True); raise
    NotMadeByTune for anything else."""
    path = folder / name
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(mode) and name in _recorded(folder):
        return True
    kind = "a symlink" if stat.S_ISLNK(mode) else "not a directory" \
        if not stat.S_ISDIR(mode) else "a directory `fsdpspec tune` did not make"
    raise NotMadeByTune(f"{path} exists and is {kind}: refusing to replace it; move it "
                        "away, or point checkpoint.dir elsewhere")


def check_free(folder: Path, names: Iterable[str]) -> None:
    """Refuse, before anything runs, if any of ``names`` in ``folder`` is not tune's."""
    if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
        raise NotMadeByTune(f"{folder} is a symlink or not a directory: refusing to "
                            "measure in it")
    for name in names:
        _ours(folder, name)


def fresh_dir(folder: Path, name: str) -> Path:
    """An empty directory ``folder/name`` to train in: made now and recorded, after
    removing the one an earlier tune made there (itself, not what a link names)."""
    folder.mkdir(parents=True, exist_ok=True)
    check_free(folder, ())
    path = folder / name
    try:
        if _ours(folder, name):
            shutil.rmtree(path)  # refuses a symlink swapped in since the check
        os.mkdir(path)  # fails on anything that appeared meanwhile, a link included
    except OSError as exc:
        raise NotMadeByTune(f"{path}: {exc.strerror or exc}") from None
    made = _recorded(folder) | {name}
    write_text(folder / RECORD, json.dumps({"made": sorted(made)}) + "\n")
    return path.absolute()
