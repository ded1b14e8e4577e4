"""The one exception the engine reports to the user as a single line (no traceback)."""

from __future__ import annotations


class EngineError(Exception):
    """An anticipated failure (missing weights, bad data, a non-finite loss…); its message
    is one line that says what to fix."""
