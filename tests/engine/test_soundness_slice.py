"""A fixed-seed slice of the soundness benchmark: 10 sampled specs, each refused by
`validate` or trained (2 steps, checkpoint, resume to step 3, final/) without failing.
Chosen so that the refusals cover the rule families the sampler reaches in few
trainings; the full run is `python benchmarks/soundness.py --samples 200`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")


@pytest.mark.slow
def test_ten_sampled_specs_are_refused_or_train() -> None:
    # Seed 61 (the sampler draws the tensor-parallel degree): 2 of the 10 validate and
    # train; 8 are refused, by FS104, FS132, FS140, FS142, FS302, FS310, FS312, FS314,
    # FS315, FS316 (QLoRA of a MoE), FS501, FS508, FS550, FS903, FS904.
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soundness.py"), "--samples", "10",
         "--seed", "61"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["validated_but_failed"] == 0, result.stdout[-4000:]
    assert result.returncode == 0
    assert summary["ran"] == 2 and summary["refused"] == 8
    assert set(summary["refused_by_code"]) == {
        "FS104", "FS132", "FS140", "FS142", "FS302", "FS310", "FS312", "FS314", "FS315",
        "FS316", "FS501", "FS508", "FS550", "FS903", "FS904"}
    assert "validated but failed: 0" in result.stdout
