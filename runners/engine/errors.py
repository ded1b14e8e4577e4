"""The one exception the engine reports to the user as a single line (no traceback)."""

from __future__ import annotations


class EngineError(Exception):
    """An anticipated failure (missing weights, bad data, a non-finite loss…); its message
    is one line that says what to fix."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (library errors can run to pages)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
