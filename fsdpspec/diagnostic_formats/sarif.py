"""SARIF 2.1.0, the format GitHub code scanning ingests: the rule catalogue as
`tool.driver.rules`, every diagnostic as a result with a region."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fsdpspec import __version__
from fsdpspec.cli.output import json_text
from fsdpspec.lint import RULES
from fsdpspec.lint.docs import parse_doc
from fsdpspec.lint.registry import Rule
from fsdpspec.spec.diagnostics import Diagnostic, Severity
from fsdpspec.validate import FileReport

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _rule_descriptor(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": parse_doc(rule.doc).prose},
        "help": {"text": rule.hint, "markdown": f"{rule.hint}\n\n{rule.doc}"},
        "defaultConfiguration": {"level": LEVEL[rule.severity]},
    }


def _check_descriptor(code: str) -> dict[str, Any]:
    """Load and schema checks (FS0xx) are not lint rules; they still need a descriptor."""
    return {
        "id": code,
        "name": "spec-structure",
        "shortDescription": {"text": "the file is not a well-formed job spec"},
        "help": {"text": f"fsdpspec explain {code}; every code: docs/codes.md"},
        "defaultConfiguration": {"level": "error"},
    }


def _uri(file: str) -> str:
    path = Path(file)
    return path.as_uri() if path.is_absolute() else path.as_posix()


def _location(report: FileReport, d: Diagnostic) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(report.file)}}
    pos = d.position
    # A --set flag has no place in the file: the result names the file only.
    if pos is not None and d.file == report.file:
        physical["region"] = {"startLine": pos.line, "startColumn": pos.col,
                              "endLine": pos.end_line, "endColumn": pos.end_col}
    return {"physicalLocation": physical}


def _message(report: FileReport, d: Diagnostic) -> str:
    text = d.message if d.file == report.file else f"{d.file}: {d.message}"
    return f"{text}\nhelp: {d.hint}" if d.hint else text


def _result(report: FileReport, d: Diagnostic, index: dict[str, int]) -> dict[str, Any]:
    return {
        "ruleId": d.code,
        "ruleIndex": index[d.code],
        "level": LEVEL[d.severity],
        "message": {"text": _message(report, d)},
        "locations": [_location(report, d)],
    }


def sarif_document(reports: Sequence[FileReport]) -> dict[str, Any]:
    """Every registered rule, plus a descriptor for each load/schema code reported."""
    descriptors = [_rule_descriptor(r) for r in sorted(RULES.values(), key=lambda r: r.code)]
    seen = sorted({d.code for r in reports for d in r.diagnostics} - set(RULES))
    descriptors += [_check_descriptor(code) for code in seen]
    index = {desc["id"]: i for i, desc in enumerate(descriptors)}
    results = [_result(r, d, index) for r in reports for d in r.diagnostics]
    driver = {"name": "fsdpspec", "version": __version__, "rules": descriptors}
    return {"$schema": SCHEMA, "version": "2.1.0",
            "runs": [{"tool": {"driver": driver}, "results": results}]}


def render(reports: Sequence[FileReport]) -> str:
    return json_text(sarif_document(reports), ensure_ascii=False)
