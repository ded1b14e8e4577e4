"""Golden cases: tests/cases/valid/*.yaml validate clean; each tests/cases/invalid/X.yaml
yields exactly the `LINE:COL CODE` lines of X.expected (a diagnostic raised against a
--set flag, whose arguments sit in X.args, is written `FLAG LINE:COL CODE`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import CASES
from fsdpspec.validate import check_file

VALID = sorted((CASES / "valid").glob("*.yaml"))
INVALID = sorted((CASES / "invalid").glob("*.yaml"))


def _overrides(case: Path) -> list[str]:
    args = case.with_suffix(".args")
    if not args.exists():
        return []
    tokens = args.read_text().split("\n")
    return [tokens[i + 1] for i, t in enumerate(tokens) if t == "--set"]


def observed(case: Path) -> list[str]:
    report = check_file(case, _overrides(case))
    lines = []
    for d in report.diagnostics:
        where = f"{d.position.line}:{d.position.col} {d.code}"
        lines.append(where if d.file == report.file else f"{d.file} {where}")
    return lines


@pytest.mark.parametrize("case", VALID, ids=lambda p: p.stem)
def test_valid_case_is_clean(case: Path) -> None:
    assert observed(case) == []


@pytest.mark.parametrize("case", INVALID, ids=lambda p: p.stem)
def test_invalid_case_matches_golden(case: Path) -> None:
    expected_file = case.with_suffix(".expected")
    got = observed(case)
    if os.environ.get("FSDPSPEC_REGEN") == "1":
        expected_file.write_text("".join(line + "\n" for line in got))
    assert got, "an invalid case must produce diagnostics"
    assert got == expected_file.read_text().splitlines()


def test_enough_invalid_cases() -> None:
    assert len(INVALID) >= 30
