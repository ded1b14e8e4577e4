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
    # Seed 7: 8 of the 20 validate; 12 are refused (FS550 ×6, FS302, FS551, FS142 ×3,
    # FS140, FS508, FS230, FS903 ×2, FS143, FS231, FS132).
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soundness.py"), "--samples", "20",
         "--seed", "7"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["validated_but_failed"] == 0, result.stdout[-4000:]
    assert result.returncode == 0
    assert summary["ran"] == 8 and summary["refused"] == 12
    assert "validated but failed: 0" in result.stdout
