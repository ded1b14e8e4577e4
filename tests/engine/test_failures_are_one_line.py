"""Engine failures a user can cause (issue 11, item 9) end as one line naming the
cause, from whichever rank saw it first, and no traceback: real `fsdpspec run` jobs,
torchrun with 2 processes on gloo."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_jobs import fsdpspec_run, job_file

pytest.importorskip("torch")


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if "fsdpspec engine: error:" in line]


def _corrupt_data(tmp_path: Path) -> dict:
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "hello world"}\n' * 50 + "{not json\n")
    return {"data": {"source": "jsonl", "path": str(data)}}


def _bad_resume(tmp_path: Path) -> dict:
    (tmp_path / "step-00000002").mkdir()
    (tmp_path / "step-00000002" / ".metadata").write_bytes(b"garbage")
    return {"checkpoint": {"resume": str(tmp_path / "step-00000002")}}


@pytest.mark.slow
@pytest.mark.parametrize(("make", "cause"), [
    (_corrupt_data, "train.jsonl:51: not valid JSON"),
    (_bad_resume, "does not verify: it has no manifest"),
])
def test_a_failure_is_one_line_naming_its_cause(make, cause: str, tmp_path: Path) -> None:
    result = fsdpspec_run(job_file(tmp_path, make(tmp_path)))
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert "Traceback" not in output
    errors = _errors(output)
    assert len(errors) == 1 and cause in errors[0], output[-3000:]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs: room for the pre-flight's one checkpoint, not for three."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
                          capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.slow
def test_a_full_disk_is_one_line(small_disk: Path) -> None:
    job = job_file(small_disk, {"train": {"max_steps": 8},
                                "checkpoint": {"interval_steps": 2, "keep_last": 0}})
    result = fsdpspec_run(job)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert "Traceback" not in output
    errors = _errors(output)
    assert len(errors) == 1 and "no space left on" in errors[0].lower(), output[-3000:]
