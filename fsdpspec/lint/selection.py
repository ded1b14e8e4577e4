"""Which rules run: `--select` / `--ignore` by code prefix, longest prefix wins (as in
flake8), plus the spec's own `lint.ignore`."""

from __future__ import annotations

from collections.abc import Sequence


def normalize(prefix: str) -> str:
    """`FS1xx` and `fs1` both mean the prefix `FS1`."""
    return prefix.strip().upper().rstrip("X")


def _longest(code: str, prefixes: Sequence[str]) -> int:
    """Length of the longest prefix in ``prefixes`` that ``code`` starts with; -1 for none."""
    return max((len(p) for p in prefixes if code.startswith(p)), default=-1)


def is_selected(code: str, select: Sequence[str], ignore: Sequence[str]) -> bool:
    """Whether a rule runs. No --select selects everything; when a select and an ignore
    prefix both match, the longer one decides, and a tie ignores."""
    chosen = _longest(code, [normalize(p) for p in select] or [""])
    dropped = _longest(code, [normalize(p) for p in ignore])
    return chosen > dropped


def matches_any(prefix: str, codes: Sequence[str]) -> bool:
    """Whether a prefix names at least one of ``codes`` (to catch typos)."""
    wanted = normalize(prefix)
    return any(code.startswith(wanted) for code in codes)
