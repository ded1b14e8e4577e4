"""Machine-readable diagnostics: one object per file, stable keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fsdpspec.cli.output import json_text
from fsdpspec.spec.diagnostics import Diagnostic, Severity
from fsdpspec.validate import FileReport


def diagnostic_data(d: Diagnostic) -> dict[str, Any]:
    pos = d.position
    return {
        "code": d.code,
        "severity": d.severity.value,
        "message": d.message,
        "hint": d.hint,
        "path": d.path,
        "file": d.file,
        "line": pos.line if pos else None,
        "col": pos.col if pos else None,
        "end_line": pos.end_line if pos else None,
        "end_col": pos.end_col if pos else None,
    }


def render(reports: Sequence[FileReport]) -> str:
    every = [d for r in reports for d in r.diagnostics]
    document = {
        "files": [
            {"file": r.file, "valid": not r.has_errors,
             "diagnostics": [diagnostic_data(d) for d in r.diagnostics]}
            for r in reports
        ],
        "summary": {
            sev.value + "s": sum(d.severity is sev for d in every) for sev in Severity
        },
    }
    return json_text(document, ensure_ascii=False)
