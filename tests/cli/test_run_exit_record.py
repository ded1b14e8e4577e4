"""`fsdpspec run --exit-record FILE`: the status the run exits with, written for the
sbatch script (docs/clusters.md), never over a file that exists."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli


def test_a_refused_run_records_its_status_and_never_replaces_a_file(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: x}\n")
    record = tmp_path / "node-0"
    first = run_cli("run", str(spec), "--exit-record", str(record))
    assert first.returncode == 1 and record.read_text() == "1\n"
    record.write_text("mine\n")
    again = run_cli("run", str(spec), "--exit-record", str(record))
    assert again.returncode == 1 and record.read_text() == "mine\n"
    assert f"fsdpspec: --exit-record {record} exists: not replaced" in again.stderr
    assert "Traceback" not in again.stderr
    missing = run_cli("run", str(spec), "--exit-record", str(tmp_path / "no" / "node-0"))
    assert missing.returncode == 1 and "No such file or directory" in missing.stderr
