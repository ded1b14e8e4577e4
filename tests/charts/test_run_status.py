"""The report on a running and on a failed run: the status comes from the run's lock and
its events.jsonl, written by real runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fault_jobs import fsdpspec_run, job_file, run_dir

from conftest import run_cli
from fsdpspec.charts.rundata import read_run
from fsdpspec_runners.local.runlock import run_lock

# A real 2-process training run (the trained_run fixture, ~40 s on 2 cores).
pytestmark = pytest.mark.slow

NAN_GRADIENT_AT_STEP_3 = {
    "model": {"preset": None, "factory": "nonfinite_model:build"},
    "fsdp": {"transformer_layer_cls": ["Block"]},
    "data": {"global_batch_size": 2},
    "logging": {"interval_steps": 1},
    "train": {"max_steps": 5},
    "checkpoint": {"interval_steps": 1},
}


def test_a_run_holding_its_lock_is_running(trained_run: dict, tmp_path: Path) -> None:
    run = read_run(trained_run["run_dir"])
    with run_lock(run.spec, run.run_dir):
        running = read_run(run.run_dir).status
        result = run_cli("report", str(run.run_dir), "-o", str(tmp_path / "r.html"))
    assert running.state == "running" and "step 12 of 12" in running.detail
    assert result.returncode == 0
    assert '<span class="status running">running</span>' in (tmp_path / "r.html").read_text()
    assert read_run(run.run_dir).status.state == "finished"


def test_a_failed_run_says_why(tmp_path: Path) -> None:
    job = job_file(tmp_path, NAN_GRADIENT_AT_STEP_3)
    assert fsdpspec_run(job, FSDPSPEC_TEST_NAN_GRAD_AT="3").returncode == 1
    status = read_run(run_dir(job)).status
    assert status.state == "failed"
    assert status.detail == ("step 2 of 5: non-finite gradient norm nan at step 3; stopped "
                             "(train.on_nonfinite: stop); the last checkpoint is unchanged")
    html = tmp_path / "failed.html"
    result = run_cli("report", str(run_dir(job)), "-o", str(html))
    assert result.returncode == 0, result.stderr
    assert '<span class="status bad">failed</span>' in html.read_text()


def test_not_a_run_directory_is_one_line(tmp_path: Path) -> None:
    result = run_cli("report", str(tmp_path), "-o", str(tmp_path / "r.html"))
    assert result.returncode == 1
    assert result.stderr == f"Error: {tmp_path}: not a run directory (no resolved-spec.json)\n"
    assert not (tmp_path / "r.html").exists()


def test_the_report_reads_files_and_never_loads_torch(trained_run: dict, tmp_path: Path) -> None:
    code = ("import sys\nfrom fsdpspec.cli.main import cli\n"
            f"try:\n    cli(['report', {str(trained_run['run_dir'])!r}, '-o', "
            f"{str(tmp_path / 'r.html')!r}])\n"
            "except SystemExit as exit:\n    assert not exit.code\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'transformers')), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.stderr.strip().splitlines()[-1] == "[]", result.stderr
