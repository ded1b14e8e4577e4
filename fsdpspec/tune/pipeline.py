"""`tune_file`: validate a job, search its open levers, and validate the fastest
candidates through the same pipeline as `fsdpspec validate` (lint rules included), in
rank order until enough pass. A candidate that does not validate is counted and its first
error kept: never dropped in silence."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fsdpspec.spec.diagnostics import Diagnostic
from fsdpspec.spec.load import Loaded, join, load_file
from fsdpspec.tune.search import Candidate, search, search_counts
from fsdpspec.tune.search_space import LEVER_KEYS, LEVERS
from fsdpspec.validate import FileReport, check_loaded

# The memory verdicts are what tune decides by itself: a base job that does not fit is
# where a search starts, not an error.
MEMORY_VERDICTS = ("FS201", "FS202", "FS203")


@dataclass
class Ranking:
    """The validated candidates, fastest first, and what the search saw."""

    base: FileReport
    open_keys: tuple[str, ...]
    tried: int
    fitting: int
    ranked: list[Candidate] = field(default_factory=list)
    rejected: list[tuple[Candidate, Diagnostic]] = field(default_factory=list)
    # With GPU counts: candidates left out as past where scaling pays.
    past_scaling: int = 0


def written_keys(report: FileReport) -> set[str]:
    """Lever keys the document (or a --set) sets: the spec decided them."""
    explicit = set(report.source_map.values) | set(report.source_map.overrides)
    return {key for key in LEVER_KEYS if _pointer(key) in explicit}


def _pointer(key: str) -> str:
    pointer = ""
    for part in key.split("."):
        pointer = join(pointer, part)
    return pointer


def open_levers(report: FileReport, vary: Sequence[str]) -> tuple[str, ...]:
    """What the search changes: the levers ``vary`` names ("all": every one that means
    something for the model), else those the spec leaves unset that do."""
    if vary and "all" not in vary:
        return tuple(key for key in LEVER_KEYS if key in vary)
    written = set() if vary else written_keys(report)
    assert report.job is not None
    return tuple(lever.key for lever in LEVERS
                 if lever.key not in written and (vary or not lever.opt_in)
                 and (lever.applies is None or lever.applies(report.job)))


def validated(loaded: Loaded, path: Path, overrides: Sequence[str],
              candidate: Candidate) -> Diagnostic | None:
    """The first error the candidate's spec has, through the validate pipeline (the
    file read once, each candidate checking a copy)."""
    report = check_loaded(copy.deepcopy(loaded), path, [*overrides, *candidate.overrides])
    return next((d for d in report.diagnostics if d.is_error), None)


def tune_file(path: Path, overrides: Sequence[str], base: FileReport, vary: Sequence[str],
              top: int, counts: Sequence[int] = ()) -> Ranking:
    """Rank ``base`` (the validated ``path`` with ``overrides``, its job resolved with a
    geometry)'s candidates and keep the ``top`` fastest that validate; with ``counts``,
    at each of those GPU counts, fastest to train first."""
    assert base.job is not None and base.job.geometry is not None
    keys = open_levers(base, vary)
    past = 0
    if counts:
        found, tried, past = search_counts(base.job, set(keys), list(counts))
    else:
        found, tried = search(base.job, set(keys))
    ranking = Ranking(base, keys, tried, len(found) + past, past_scaling=past)
    loaded = load_file(path)
    for candidate in found:
        if len(ranking.ranked) == top:
            break
        problem = validated(loaded, path, overrides, candidate)
        if problem is None:
            ranking.ranked.append(candidate)
        else:
            ranking.rejected.append((candidate, problem))
    return ranking
