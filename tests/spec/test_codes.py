"""Every FS0xx code the loader, schema check and validator emit is documented, and
`fsdpspec explain` prints it like a lint rule's."""

from __future__ import annotations

import re

import pytest

from conftest import ROOT, run_cli
from fsdpspec.spec.codes import LOAD_CODES

EMITTED = sorted({code for path in (ROOT / "fsdpspec").rglob("*.py")
                  for code in re.findall(r'"(FS0\d\d)"', path.read_text(encoding="utf-8"))})


def test_every_emitted_code_is_registered() -> None:
    assert len(EMITTED) >= 20
    assert [c for c in EMITTED if c not in LOAD_CODES] == []


def test_no_registered_code_is_unused() -> None:
    assert [c for c in LOAD_CODES if c not in EMITTED] == []


@pytest.mark.parametrize("code", ["FS023", "fs001"])
def test_explain_prints_a_load_code(code: str) -> None:
    result = run_cli("explain", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{code.upper()} ")
    assert LOAD_CODES[code.upper()].summary in result.stdout



@pytest.mark.parametrize(("code", "severity"), [("FS001", "error"), ("FS032", "warning"),
                                                ("FS053", "info")])
def test_explain_says_how_a_code_is_reported(code: str, severity: str) -> None:
    """FS032 is a warning validate goes on after, FS053 a note the import goes on after."""
    result = run_cli("explain", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{code} {LOAD_CODES[code].name} ({severity}): ")
