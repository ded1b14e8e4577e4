"""`path:line:col: CODE severity message` — one line per diagnostic, for grep and CI."""

from __future__ import annotations

from collections.abc import Sequence

from fsdpspec.spec.diagnostics import Diagnostic
from fsdpspec.validate import FileReport


def line(d: Diagnostic) -> str:
    return f"{d.location}: {d.code} {d.severity.value} {d.message}"


def render(reports: Sequence[FileReport]) -> str:
    return "".join(line(d) + "\n" for r in reports for d in r.diagnostics)
