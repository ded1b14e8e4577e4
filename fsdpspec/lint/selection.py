"""Which rules run: `--select` / `--ignore` by code prefix, longest prefix wins (as in
flake8), plus the spec's own `lint.ignore`."""

from __future__ import annotations

from collections.abc import Sequence

from fsdpspec.spec.diagnostics import normalize_prefix as normalize


def _longest(code: str, prefixes: Sequence[str]) -> int:
    """Length of the longest prefix in ``prefixes`` that ``code`` starts with; -1 for none."""
    return max((len(p) for p in prefixes if code.startswith(p)), default=-1)


def _prefixes(given: Sequence[str]) -> list[str]:
    """Normalized prefixes; an empty one ("" or "x") names no rule, so it must never
    select or ignore every rule."""
    return [p for p in map(normalize, given) if p]


def is_selected(code: str, select: Sequence[str], ignore: Sequence[str]) -> bool:
    """Whether a rule runs. No --select selects everything; when a select and an ignore
    prefix both match, the longer one decides, and a tie ignores."""
    chosen = _longest(code, _prefixes(select) or [""])
    dropped = _longest(code, _prefixes(ignore))
    return chosen > dropped


def matches_any(prefix: str, codes: Sequence[str]) -> bool:
    """Whether a prefix names at least one of ``codes`` (to catch typos)."""
    wanted = normalize(prefix)
    return bool(wanted) and any(code.startswith(wanted) for code in codes)
