"""An empty rule code never switches off every rule (issue 11, item 10); the spec's
`lint.ignore: [""]` is covered by tests/cases/invalid/lint-ignore-empty-code.yaml."""

from __future__ import annotations

import pytest

from conftest import CASES, run_cli
from fsdpspec.lint.selection import is_selected

NOT_FITTING = CASES / "invalid" / "lint-FS201-does-not-fit.yaml"


@pytest.mark.parametrize("flag", ["--ignore", "--select"])
@pytest.mark.parametrize("code", ["", " ", "x"])
def test_an_empty_code_on_the_command_line_is_a_usage_error(flag: str, code: str) -> None:
    result = run_cli("validate", flag, code, str(NOT_FITTING))
    assert result.returncode == 2
    assert "matches no lint rule" in result.stderr and "Traceback" not in result.stderr


def test_an_empty_prefix_ignores_nothing() -> None:
    assert is_selected("FS201", select=[], ignore=["", "xx"])
    assert not is_selected("FS201", select=[], ignore=["", "FS2"])
