"""A fixed-seed slice of the soundness benchmark: 20 sampled specs, each refused by
`validate` or trained (2 steps, checkpoint, resume to step 3, final/) without failing.
The full run is `python benchmarks/soundness.py --samples 200`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")


@pytest.mark.slow
def test_twenty_sampled_specs_are_refused_or_train() -> None:
    # Seed 7: 7 of the 20 validate (one compiles, three fine-tune with LoRA); 13 are
    # refused (FS508, FS302, FS501, FS903, FS132, FS140, FS142).
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soundness.py"), "--samples", "20",
         "--seed", "7"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["validated_but_failed"] == 0, result.stdout[-4000:]
    assert result.returncode == 0
    assert summary["ran"] == 7 and summary["refused"] == 13
    assert "validated but failed: 0" in result.stdout
