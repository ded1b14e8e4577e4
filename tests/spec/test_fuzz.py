"""Property-based fuzzing of the validation pipeline on mutated valid specs: no uncaught
exception, every diagnostic carries a code and a position inside the file.
benchmarks/fuzz.py runs the same properties for 10,000 examples."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fuzz_specs import check_text, dump, mutated_data, mutated_text
from hypothesis import HealthCheck, given, settings

FAST = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(mutated_data())
def test_mutated_documents(data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_text(dump(data), Path(tmp) / "spec.yaml")


@FAST
@given(mutated_text())
def test_damaged_text(text) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_text(text, Path(tmp) / "spec.yaml")
