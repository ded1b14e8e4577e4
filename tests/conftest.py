"""Shared test helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
# Shared helper modules (and the factory models the engine imports) live in support/.
sys.path.insert(0, str(ROOT / "tests" / "support"))


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the real `fsdpspec` CLI in a subprocess (as a user would)."""
    return subprocess.run(
        [sys.executable, "-m", "fsdpspec", *args], cwd=cwd or ROOT, capture_output=True,
        text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


@pytest.fixture
def cli():
    return run_cli
