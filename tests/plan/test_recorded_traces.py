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
    ("--sweep", "plan_accuracy_sweep.traces.jsonl", 170),
    ("--levers", "plan_accuracy_levers.traces.jsonl", 30),
    # Tensor parallelism: every dense family with a plan, degree 2 and 8, AC none / full.
    ("--tp", "plan_accuracy_tp.traces.jsonl", 36),
    # DPO: each reference (model, adapter, precomputed), AC none / full, Llama and Qwen2.
    ("--dpo", "plan_accuracy_dpo.traces.jsonl", 12),
])
def test_every_recorded_row_meets_the_targets(mode: str, traces: str, rows: int) -> None:
    code, median, largest, printed = _recheck(mode, "--traces", f"benchmarks/{traces}")
    assert printed == rows and median <= 1.0 and largest <= 3.0
    assert code == 0  # and no row under by more than 1 %


def test_the_row_issue_19_named_meets_the_targets() -> None:
    """StarCoder2-3B as published (attention dropout 0.1), FULL_SHARD over 8, bf16, full
    checkpointing, sequence 2048, micro-batch 1: its trace was 8.60 GiB against a plan
    of 7.08 (−17.6 %) until the trace took the GPU's fused dropout kernel (issue 33)."""
    code, _, largest, printed = _recheck("--sweep", "--match", "starcoder2-3b-published",
                                         "--traces", "benchmarks/plan_accuracy_sweep.traces.jsonl")
    assert printed == 1 and largest <= 1.0 and code == 0
