"""The run directory of a multi-node job: node 0 prepares it, the other nodes join it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fsdpspec.runfiles.resolved import FILENAME, write_resolved_spec
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.local.rundir_setup import RunDirError, join_run_dir, prepare_run_dir


def job(**changes) -> JobSpec:
    data = {"apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "multi"},
            "model": {"preset": "tiny-llama"}} | changes
    return JobSpec.model_validate(data)


def test_a_joining_node_waits_for_node_0_and_writes_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    spec = job()
    later = threading.Timer(0.6, prepare_run_dir, args=(spec, run_dir))
    later.start()
    assert not run_dir.exists()
    join_run_dir(spec, run_dir, timeout_s=10)
    assert (run_dir / FILENAME).is_file()  # it returned only once node 0 had written it
    later.join()
    assert sorted(p.name for p in run_dir.iterdir()) == [FILENAME]


def test_a_joining_node_refuses_another_job(tmp_path: Path) -> None:
    write_resolved_spec(job(), tmp_path)
    with pytest.raises(RunDirError, match="different optimizer.lr"):
        join_run_dir(job(optimizer={"lr": 0.5}), tmp_path, timeout_s=1)


def test_a_joining_node_gives_up_when_node_0_never_comes(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="start node 0 first"):
        join_run_dir(job(), tmp_path, timeout_s=0.2)


def test_resume_never_still_refuses_an_existing_run_on_node_0(tmp_path: Path) -> None:
    write_resolved_spec(job(), tmp_path)
    with pytest.raises(RunDirError, match="checkpoint.resume is never"):
        prepare_run_dir(job(checkpoint={"resume": "never"}), tmp_path)


@pytest.mark.parametrize("name", ["events.jsonl", "metrics.jsonl", "checkpoints/latest"])
def test_a_run_file_that_is_a_fifo_is_refused_not_waited_on(name: str, tmp_path: Path) -> None:
    import os

    assert prepare_run_dir(job(), tmp_path) is False
    (tmp_path / name).parent.mkdir(exist_ok=True)
    os.mkfifo(tmp_path / name)
    with pytest.raises(RunDirError, match=f"^{tmp_path / name} is not a regular file"):
        prepare_run_dir(job(), tmp_path)


def test_events_are_never_appended_through_a_fifo(tmp_path: Path) -> None:
    import os

    from fsdpspec.runfiles.events import append_event

    os.mkfifo(tmp_path / "events.jsonl")
    with pytest.raises(OSError):  # ENXIO: no reader; never a wait for one
        append_event(tmp_path, "exit", code=0)
