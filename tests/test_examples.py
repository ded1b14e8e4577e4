"""Every shipped example validates clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from fsdpspec.validate import check_file

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# The jobs the benchmarks and the tune tests run are shipped specs too.
JOBS = [ROOT / "benchmarks" / "tune_job" / "job.yaml", ROOT / "tests" / "tune" / "tiny-job.yaml"]


def test_the_four_seed_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"quickstart.yaml", "llama3-8b-h100.yaml", "llama3-70b-multinode.yaml",
            "fsdp1-seed-recipe.yaml"} <= names


@pytest.mark.parametrize("example", EXAMPLES + JOBS, ids=lambda p: p.stem)
def test_example_is_clean(example: Path) -> None:
    report = check_file(example)
    assert report.diagnostics == []
    assert report.spec is not None
