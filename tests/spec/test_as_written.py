"""A spec as its file wrote it (what a scheduler's job carries): it validates back to the
same JobSpec, and lint sees no default as if it had been written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from fsdpspec.spec.v1 import JobSpec
from fsdpspec.validate import check_file

SPECS = sorted((ROOT / "examples").glob("*.yaml")) + sorted(
    (ROOT / "tests" / "cases" / "valid").glob("*.yaml"))


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_as_written_validates_to_the_same_spec(path: Path) -> None:
    spec = check_file(path).spec
    assert spec is not None
    assert JobSpec.model_validate(spec.as_written()) == spec


def test_the_written_spec_lints_as_the_file_does(tmp_path: Path) -> None:
    spec = check_file(ROOT / "examples" / "quickstart.yaml").spec
    assert spec is not None
    written = tmp_path / "job.json"
    written.write_text(json.dumps(spec.as_written()))
    result = run_cli("validate", str(written))
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""
