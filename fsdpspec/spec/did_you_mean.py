"""'Did you mean' suggestions."""

from __future__ import annotations

from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``word`` (case-insensitive), if any is close enough."""
    options = list(candidates)
    lowered = {c.lower(): c for c in options}
    if word.lower() in lowered:
        return lowered[word.lower()]
    prefixed = [c for low, c in lowered.items() if word and low.startswith(word.lower())]
    if len(prefixed) == 1:
        return prefixed[0]
    import difflib  # only a misspelling gets this far

    match = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None
