"""The tree stays ruff-clean."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import ROOT


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    result = subprocess.run([ruff, "check", "fsdpspec", "runners", "tests", "benchmarks"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
