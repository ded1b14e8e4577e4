"""The shipped compiled schemas (fsdpspec.spec.compiled): a fresh process validates with
them, and one whose pydantic-core differs from the one they were compiled by has pydantic
generate the schemas itself and says the same about every case."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import CASES, ROOT

# Prints, for each case, whether JobSpec came compiled and the codes validate finds.
_PROBE = """
import json, sys
import pydantic, pydantic_core  # pydantic checks pydantic-core's version as it imports
if sys.argv[1] == "stale":
    pydantic_core.__version__ = "0.0"
from fsdpspec.spec.v1 import JobSpec
compiled = JobSpec.from_compiled
from pathlib import Path
from fsdpspec.validate import check_file
codes = {p: [d.code for d in check_file(Path(p)).diagnostics] for p in sys.argv[2:]}
print(json.dumps({"compiled": compiled, "codes": codes}))
"""


def _probe(mode: str) -> dict:
    cases = sorted(str(p) for p in (CASES / "invalid").glob("*.yaml"))[:40]
    cases += sorted(str(p) for p in (CASES / "valid").glob("*.yaml"))
    done = subprocess.run([sys.executable, "-c", _PROBE, mode, *cases], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_a_fresh_process_validates_with_the_compiled_schemas() -> None:
    assert _probe("current")["compiled"] is True


def test_a_stale_file_is_not_loaded_and_the_models_say_the_same() -> None:
    current, stale = _probe("current"), _probe("stale")
    assert stale["compiled"] is False
    assert stale["codes"] == current["codes"]
    assert any(current["codes"].values())
