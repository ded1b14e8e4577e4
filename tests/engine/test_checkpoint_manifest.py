"""Checkpoints verify before a resume (issue 11, item 7), on real `fsdpspec run` jobs
(torchrun, 2 processes on gloo): each save records every file's size and sha256 in a
manifest written last; a truncated, flipped or missing file, or a garbage .metadata,
makes the run fall back to the newest checkpoint that verifies, saying so in one line,
and when none verifies the run stops with one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from engine_jobs import metrics
from fault_jobs import fsdpspec_run, job_file, run_dir

pytest.importorskip("torch")

JOB = {"train": {"max_steps": 6}, "checkpoint": {"interval_steps": 2, "keep_last": 0}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 6-step run with checkpoints at steps 2, 4 and 6, which each test copies and
    damages its own way."""
    job = job_file(tmp_path_factory.mktemp("trained"), JOB)
    first = fsdpspec_run(job)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (run_dir(job) / "checkpoints" / "step-00000006" / "manifest.json").is_file()
    return run_dir(job)


def _copy(trained: Path, directory: Path) -> Path:
    """The trained run in ``directory`` (its own run directory), as ``job_file`` names it."""
    job = job_file(directory, {**JOB, "train": {"max_steps": 8}})
    shutil.copytree(trained, run_dir(job))
    return job


def _shard(checkpoint: Path) -> Path:
    return sorted(checkpoint.glob("*.distcp"))[0]


def _truncate(checkpoint: Path) -> None:
    shard = _shard(checkpoint)
    shard.write_bytes(shard.read_bytes()[:-7])


def _flip(checkpoint: Path) -> None:
    shard = _shard(checkpoint)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))


def _remove(checkpoint: Path) -> None:
    _shard(checkpoint).unlink()


def _garbage_metadata(checkpoint: Path) -> None:
    (checkpoint / ".metadata").write_bytes(b"garbage")


@pytest.mark.slow
def test_a_corrupt_newest_checkpoint_falls_back_to_one_that_verifies(
        trained: Path, tmp_path: Path) -> None:
    job = _copy(trained, tmp_path)
    checkpoints = run_dir(job) / "checkpoints"
    _truncate(checkpoints / "step-00000006")
    _flip(checkpoints / "step-00000004")
    again = fsdpspec_run(job)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-3000:]
    said = [line for line in output.splitlines() if "does not verify" in line]
    assert len(said) == 1, said
    assert "step-00000006 does not verify" in said[0] and "step-00000004 does not verify" \
        in said[0] and "resuming from step-00000002 instead" in said[0]
    assert [m["step"] for m in metrics(run_dir(job))] == list(range(1, 9))


@pytest.mark.slow
def test_when_no_checkpoint_verifies_the_run_stops_with_one_line(
        trained: Path, tmp_path: Path) -> None:
    job = _copy(trained, tmp_path)
    checkpoints = run_dir(job) / "checkpoints"
    _remove(checkpoints / "step-00000002")
    _garbage_metadata(checkpoints / "step-00000004")
    (checkpoints / "step-00000006" / "manifest.json").unlink()
    again = fsdpspec_run(job)
    assert again.returncode == 1
    assert "Traceback" not in again.stderr
    errors = [line for line in (again.stdout + again.stderr).splitlines()
              if "no checkpoint verifies" in line]
    assert len(errors) == 1, again.stderr[-3000:]
    assert "is missing" in errors[0] and "bytes, not" in errors[0] and "no manifest" in errors[0]
