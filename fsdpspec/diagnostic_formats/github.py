"""GitHub Actions workflow commands: one `::error file=…,line=…::message` annotation per
diagnostic, shown on the pull request's changed lines."""

from __future__ import annotations

from collections.abc import Sequence

from fsdpspec.spec.diagnostics import Diagnostic, Severity
from fsdpspec.validate import FileReport

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(report: FileReport, d: Diagnostic) -> str:
    properties = [("file", report.file)]
    pos = d.position
    if pos is not None and d.file == report.file:
        properties += [("line", pos.line), ("col", pos.col), ("endLine", pos.end_line),
                       ("endColumn", pos.end_col)]
    properties.append(("title", d.code))
    text = d.message if d.file == report.file else f"{d.file}: {d.message}"
    if d.hint:
        text += f"\nhelp: {d.hint}"
    fields = ",".join(f"{key}={_escape_property(str(value))}" for key, value in properties)
    return f"::{COMMAND[d.severity]} {fields}::{_escape_data(text)}"


def render(reports: Sequence[FileReport]) -> str:
    return "".join(annotation(r, d) + "\n" for r in reports for d in r.diagnostics)
