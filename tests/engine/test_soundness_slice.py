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
    # Seed 61: 1 of the 10 validates (a LoRA on tiny-qwen2, merged); 9 are refused, by
    # FS132, FS140, FS142, FS231, FS302, FS310, FS312, FS314, FS315, FS501, FS550, FS551,
    # FS903, FS904.
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soundness.py"), "--samples", "10",
         "--seed", "61"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["validated_but_failed"] == 0, result.stdout[-4000:]
    assert result.returncode == 0
    assert summary["ran"] == 1 and summary["refused"] == 9
    assert set(summary["refused_by_code"]) == {
        "FS132", "FS140", "FS142", "FS231", "FS302", "FS310", "FS312", "FS314", "FS315",
        "FS501", "FS550", "FS551", "FS903", "FS904"}
    assert "validated but failed: 0" in result.stdout
