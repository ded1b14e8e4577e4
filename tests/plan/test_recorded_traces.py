"""The plan against the committed fake-tensor traces, as docs/memory.md runs it: a change
to the plan that moves a row past the accuracy targets fails here, without tracing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"median \|error\| ([\d.]+)%\s+max \|error\| ([\d.]+)%")


def _recheck(*args: str) -> tuple[int, float, float, int]:
    """Exit code, median and max |error| %, and the number of rows printed."""
    result = subprocess.run([sys.executable, "benchmarks/plan_accuracy.py", *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    found = SUMMARY.search(result.stdout)
    assert found, result.stdout[-2000:] + result.stderr[-2000:]
    rows = len(re.findall(r"^\S+ +\d+ +[\d.]+ +[\d.]+ +[+-][\d.]+% ", result.stdout, re.M))
    return result.returncode, float(found[1]), float(found[2]), rows


@pytest.mark.parametrize(("mode", "traces", "rows"), [
    ("--sweep", "plan_accuracy_sweep.traces.jsonl", 162),
    ("--levers", "plan_accuracy_levers.traces.jsonl", 30),
])
def test_every_recorded_row_meets_the_targets(mode: str, traces: str, rows: int) -> None:
    code, median, largest, printed = _recheck(mode, "--traces", f"benchmarks/{traces}")
    assert printed == rows and median <= 1.0 and largest <= 3.0
    assert code == 0  # and no row under by more than 1 %
