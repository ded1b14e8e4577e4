"""The crash tests' FSDPSPEC_TEST_* settings are read by the shipped engine: garbage in
one, from the shell or from a spec's `launch.env`, is one line from `fsdpspec run`
before anything starts (never a traceback in a rank mid-run, nor a pause that hangs),
and the engine reads them through the same total reader however it is launched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from fsdpspec.runfiles.fault_settings import Faults, FaultSettingError, read_faults

JOB = ROOT / "tests" / "tune" / "tiny-job.yaml"  # a valid 2-process CPU job


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("FSDPSPEC_TEST_SIGNAL_AT_STEP", "x", "a step (an integer)"),
    ("FSDPSPEC_TEST_KILL_AT_STEP", "9" * 5000, "STEP or STEP:RANK (integers)"),
    ("FSDPSPEC_TEST_PAUSE_IN_SAVE", "nan", "seconds from 0 to 60"),
    ("FSDPSPEC_TEST_STEP_PAUSE", "1e9", "seconds from 0 to 60"),
])
def test_a_bad_fault_setting_is_one_line_before_anything_starts(
        tmp_path: Path, name: str, value: str, expected: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB.read_text())
    result = run_cli("run", str(job), cwd=tmp_path, env={name: value})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]  # after the plan line
    assert last.startswith(f"Error: {name}=") and last.endswith(
        f": expected {expected} (a test-only setting; unset it)"), last
    assert len(last) < 200
    assert not (tmp_path / "runs").exists()  # no run directory: nothing started


def test_a_spec_setting_a_fault_in_launch_env_is_refused_too(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB.read_text())
    env = json.dumps({"FSDPSPEC_TEST_PAUSE_IN_SAVE": "86400"})
    result = run_cli("run", str(job), "--set", f"launch.env={env}", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: FSDPSPEC_TEST_PAUSE_IN_SAVE=86400: expected seconds from 0 to 60 (a "
        "test-only setting; unset it)")
    assert not (tmp_path / "runs").exists()


def test_the_settings_the_crash_tests_write_are_read_as_they_mean() -> None:
    env = {"FSDPSPEC_TEST_SIGNAL_AT_STEP": "15", "FSDPSPEC_TEST_KILL_AT_STEP": "5:1",
           "FSDPSPEC_TEST_PAUSE_IN_SAVE": "8", "FSDPSPEC_TEST_STEP_PAUSE": "0.2"}
    assert read_faults(env) == Faults(15, (5, 1), 8.0, 0.2)
    assert read_faults({"FSDPSPEC_TEST_KILL_AT_STEP": "3"}).kill_at_step == (3, 0)
    assert read_faults({}) == Faults()
    for name, value in (("FSDPSPEC_TEST_KILL_AT_STEP", ":1"),
                        ("FSDPSPEC_TEST_KILL_AT_STEP", "5:one"),
                        ("FSDPSPEC_TEST_SIGNAL_AT_STEP", "²"),
                        ("FSDPSPEC_TEST_STEP_PAUSE", "-1"),
                        ("FSDPSPEC_TEST_PAUSE_IN_SAVE", "inf")):
        with pytest.raises(FaultSettingError, match=f"^{name}="):
            read_faults({name: value})
