"""The one currency of problems: a Diagnostic, produced everywhere, rendered once."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


# A diagnostic about a value a `--set` flag gave names the flag as its source.
FLAG_SOURCE = "--set "


@dataclass(frozen=True)
class Position:
    """A 1-based span in a source: where a diagnostic points."""

    line: int
    col: int
    end_line: int
    end_col: int


@dataclass(frozen=True)
class Diagnostic:
    """A problem with a document.

    ``path`` is a JSON pointer into the document; the pipeline resolves it to ``file``
    and ``position`` through the SourceMap. Rules create diagnostics without positions.
    """

    code: str
    severity: Severity
    message: str
    path: str = ""
    hint: str | None = None
    file: str | None = None
    position: Position | None = None
    # The problem is the key at ``path`` (unknown or misnamed), not its value.
    on_key: bool = False

    def at(self, file: str, position: Position | None) -> Diagnostic:
        return replace(self, file=file, position=position)

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    @property
    def location(self) -> str:
        """``file:line:col``; a --set flag alone, since a line and column after
        ``--set resources.nodes=2`` would read as part of its value."""
        pos = self.position
        if pos is None or (self.file or "").startswith(FLAG_SOURCE):
            return str(self.file)
        return f"{self.file}:{pos.line}:{pos.col}"


def error(code: str, message: str, path: str = "", hint: str | None = None) -> Diagnostic:
    return Diagnostic(code, Severity.ERROR, message, path, hint)


def normalize_prefix(prefix: str) -> str:
    """`FS1xx` and `fs1` both mean the code prefix `FS1`; "" and "x" mean nothing, not
    every code."""
    return prefix.strip().upper().rstrip("X")


def sort_key(d: Diagnostic) -> tuple:
    pos = d.position or Position(0, 0, 0, 0)
    return (d.file or "", pos.line, pos.col, d.code)
