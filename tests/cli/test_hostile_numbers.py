"""Issue 42, as a user types it: every number an answer prints is finite and every JSON
is JSON (the budget flags refuse what is not a finite, positive, bounded number: a usage
error naming the flag); no check loops in a number the user wrote (a hang guard, not a
timing); `run --dry-run --exit-record` records its status; a reused anchor is one coded
line, never Python's warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

QUICKSTART = ROOT / "examples" / "quickstart.yaml"


@pytest.mark.parametrize(("argv", "flag"), [
    (("plan", "--tokens", "nan"), "--tokens"),
    (("plan", "--price-per-gpu-hour", "nan"), "--price-per-gpu-hour"),
    (("plan", "--price-per-gpu-hour", "inf"), "--price-per-gpu-hour"),
    (("plan", "--price-per-gpu-hour", "1e308"), "--price-per-gpu-hour"),
    (("plan", "--price-per-gpu-hour", "1e400"), "--price-per-gpu-hour"),
    (("tune", "--tokens", "nan"), "--tokens"),
])
def test_a_budget_flag_that_is_no_finite_number_is_a_usage_error(argv, flag) -> None:
    command, *flags = argv
    result = run_cli(command, str(QUICKSTART), *flags, "--format", "json")
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    assert f"Error: Invalid value for '{flag}'" in result.stderr
    assert "Traceback" not in result.stderr


def _strict(text: str):
    def refuse(constant: str):
        raise AssertionError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_the_budget_in_json_is_strict_json() -> None:
    result = run_cli("plan", str(QUICKSTART), "--tokens", "1e18", "--price-per-gpu-hour",
                     "1000000", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert _strict(result.stdout)["budget"]["cost"] > 0


def test_a_tensor_parallel_degree_of_2_to_the_31_is_refused_without_looping_in_it() -> None:
    # The timeout is a hang guard: the hints counted the divisors up to the degree.
    result = run_cli("validate", str(QUICKSTART), "--format", "concise", "--set",
                     "parallelism.tensor_parallel=2147483647", timeout=120)
    assert result.returncode == 1, result.stderr
    assert ("--set parallelism.tensor_parallel=2147483647: FS170 error tensor_parallel "
            "2147483647 does not divide the model's 4 attention heads"
            in result.stdout.splitlines()), result.stdout


def test_tune_measure_of_10_to_the_12_refuses_without_counting_to_it(tmp_path: Path) -> None:
    # A directory tune did not make, where the third candidate would train: refused
    # before anything trains (it built 10^12 names first).
    planted = tmp_path / "runs" / "quickstart-tune" / "candidate-3"
    planted.mkdir(parents=True)
    result = run_cli("tune", str(QUICKSTART), "--measure", "1000000000000", cwd=tmp_path,
                     timeout=120)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: runs/quickstart-tune/candidate-3 exists and is a directory `fsdpspec tune` "
        "did not make: refusing to replace it; move it away, or point checkpoint.dir "
        "elsewhere")


def test_a_dry_run_records_its_exit_status(tmp_path: Path) -> None:
    record = tmp_path / "node-0"
    result = run_cli("run", str(QUICKSTART), "--dry-run", "--exit-record", str(record),
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert record.read_text() == "0\n"
    assert not (tmp_path / "runs").exists()  # a dry run starts nothing


def test_a_reused_anchor_is_one_coded_line(tmp_path: Path) -> None:
    spec = tmp_path / "anchor.yaml"
    spec.write_text(QUICKSTART.read_text().replace("seq_len: 128", "seq_len: &n 128")
                    .replace("micro_batch_size: 4", "micro_batch_size: &n 4"))
    result = run_cli("validate", str(spec), "--format", "concise")
    assert result.returncode == 1
    assert result.stderr == ""  # no ReusedAnchorWarning, no install path
    line = next(n for n, text in enumerate(spec.read_text().splitlines(), 1)
                if "micro_batch_size" in text)
    assert result.stdout.splitlines() == [
        f"{spec}:{line}:21: FS017 error anchor &n is defined again (first on line "
        f"{line - 1})"]
