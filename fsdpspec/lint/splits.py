"""FS530: a `data.source: dataset` split that the dataset does not have.

A local directory's splits are named by its files, as Hugging Face `datasets` names them
(`train.parquet`, `test-00000-of-00002.parquet`, `valid/…`; with no split word every file
is `train`), or listed by `save_to_disk`'s dataset_dict.json; a cached Hub dataset is its
snapshot directory. Read as file names (and one bounded JSON file), without `datasets`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from fsdpspec.catalog.config_source import hub_input, resolve_input_path
from fsdpspec.catalog.hub import cached_snapshot
from fsdpspec.jsonfile import JsonFileError, Limits, load_object
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.spec.diagnostics import Diagnostic, Severity

# datasets' split keywords (datasets.data_files), each mapped to the split it names.
_KEYWORDS = {
    "train": "train", "training": "train",
    "validation": "validation", "valid": "validation", "val": "validation", "dev": "validation",
    "test": "test", "testing": "test", "eval": "test", "evaluation": "test",
}
_KEYWORD = re.compile(rf"^({'|'.join(_KEYWORDS)})(?:[-._ 0-9]|$)", re.IGNORECASE)
_SHARDED = re.compile(r"^(\w+)-\d{5}-of-\d{5}")  # `{split}-00000-of-00002.parquet`
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow", ".csv", ".txt")
_MAX_FILES = 100_000  # a directory with more is not looked through


def _split_of(relative: Path) -> str | None:
    """The split a data file's path names (its directories first, then its name)."""
    for part in relative.parts:
        found = _KEYWORD.match(part)
        if found:
            return _KEYWORDS[found[1].lower()]
        sharded = _SHARDED.match(part)
        if sharded:
            return sharded[1]
    return None


def local_splits(directory: Path) -> set[str] | None:
    """The split names of a dataset directory; None when they cannot be told here."""
    listed = directory / "dataset_dict.json"
    if os.path.lexists(listed):
        try:
            splits = load_object(listed, Limits(max_bytes=1 << 20, max_depth=4)).get("splits")
        except JsonFileError:
            return None
        ok = isinstance(splits, list) and all(isinstance(s, str) for s in splits)
        return set(splits) if ok else None
    if os.path.lexists(directory / "state.json"):
        return None  # one saved Dataset: whichever split is asked for
    found: set[str] = set()
    files = 0
    for folder, dirs, names in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            files += 1
            if files > _MAX_FILES:
                return None
            if name.endswith(_DATA_SUFFIXES) and not name.startswith("."):
                split = _split_of((Path(folder) / name).relative_to(directory))
                found.add(split or "")
    if not found:
        return None
    named = found - {""}
    return named or {"train"}


def _dataset_directory(value: str, ctx: LintContext) -> Path | None:
    hub = hub_input(value, ctx.base_dir, "dataset")
    path = cached_snapshot(hub) if hub else resolve_input_path(value, ctx.base_dir)
    return path if path is not None and path.is_dir() else None


@rule("FS530", "split-missing", Severity.ERROR,
      "data.split or data.eval.split names a split the dataset does not have",
      "use one of the splits the message lists, or name the files after the split")
def split_missing(ctx: LintContext) -> Iterator[Diagnostic]:
    """A dataset directory's splits are its file names (`train.parquet`,
    `test-00000-of-00002.parquet`, a `valid/` folder …; files without a split word are
    all `train`) or the list `save_to_disk` wrote. A split it does not have failed when
    every rank loaded the data (`Unknown split "validation"`). A single file is
    whichever split is asked for.

    FAIL:

        data: {source: dataset, path: models/chats, eval: {split: validation}}

    PASS:

        data: {source: dataset, path: models/chats, eval: {split: test}}
    """
    data = ctx.spec.data
    if data.source != "dataset" or data.path is None:
        return
    asked = [("/data/split", data.split, data.path)]
    if data.eval.split:
        asked.append(("/data/eval/split", data.eval.split, data.eval.path or data.path))
    for pointer, split, location in asked:
        directory = _dataset_directory(location, ctx)
        splits = local_splits(directory) if directory is not None else None
        if splits is not None and split not in splits:
            yield diagnostic("FS530", f"{location} has no split {split!r} (its splits: "
                             f"{', '.join(sorted(splits))})", ctx.first_set(pointer, "/data/path"))
