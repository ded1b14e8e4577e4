"""The DDP plan against real DDP on the CPU, as docs/memory.md runs it
(`benchmarks/ddp_memory.py`: real tensors, one gloo process, MemTracker)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_the_ddp_plan_is_what_ddp_allocates_with_and_without_accumulation() -> None:
    result = subprocess.run([sys.executable, "benchmarks/ddp_memory.py"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    rows = re.findall(r"^(\d) × 2 × (\d+) +([\d.]+) +([\d.]+) +([+-][\d.]+)%$",
                      result.stdout, re.M)
    assert result.returncode == 0 and len(rows) == 4, result.stdout + result.stderr[-2000:]
    measured = {(int(r[0]), int(r[1])): float(r[3]) for r in rows}
    # Accumulation's second step holds the old buckets beside the new: measured, planned.
    assert measured[2, 256] > measured[1, 256] and measured[2, 16] > measured[1, 16]
    assert all(abs(float(r[4])) <= 1.0 for r in rows)
