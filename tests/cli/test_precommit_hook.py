"""The pre-commit hook other repositories use runs the real CLI on the files it matches."""

from __future__ import annotations

import re
import shlex

from ruamel.yaml import YAML

from conftest import ROOT, run_cli


def _hook() -> dict:
    [hook] = YAML(typ="safe", pure=True).load((ROOT / ".pre-commit-hooks.yaml").read_text())
    return hook


def test_hook_matches_job_specs_only() -> None:
    files = re.compile(_hook()["files"])
    assert files.search("training/jobs/llama.yaml") and files.search("llama.fsdpspec.yml")
    assert not files.search(".github/workflows/ci.yaml")


def test_hook_entry_validates_the_files_it_is_given() -> None:
    program, *args = shlex.split(_hook()["entry"])
    assert program == "fsdpspec"
    clean = run_cli(*args, "examples/quickstart.yaml")
    assert clean.returncode == 0 and clean.stdout == ""
    failing = run_cli(*args, "tests/cases/invalid/lint-FS501-batch-not-divisible.yaml")
    assert failing.returncode == 1 and " FS501 error " in failing.stdout
