"""A run's status from its events.jsonl (the records `fsdpspec run` and the engine write)
when no run holds the directory."""

from __future__ import annotations

from pathlib import Path

from fsdpspec.charts.rundata import history, run_status
from fsdpspec.runfiles.events import append_event, read_events


def status(run_dir: Path, step: int = 4) -> tuple[str, str]:
    found = run_status(run_dir, history(read_events(run_dir)), step, max_steps=10)
    return found.state, found.detail


def test_no_records_is_not_started(tmp_path: Path) -> None:
    assert status(tmp_path, 0) == ("not started", "no launch recorded")


def test_a_launch_without_an_ending_was_interrupted(tmp_path: Path) -> None:
    append_event(tmp_path, "start", step=0)
    assert status(tmp_path) == (
        "interrupted", "step 4 of 10; the launch ended without a record")


def test_a_signal_stops_and_a_resume_is_judged_by_its_own_ending(tmp_path: Path) -> None:
    append_event(tmp_path, "start", step=0)
    append_event(tmp_path, "end", outcome="stopped", step=4)
    append_event(tmp_path, "exit", code=130, signal="SIGINT")
    assert status(tmp_path) == ("stopped", "step 4 of 10; `fsdpspec run` again resumes")
    append_event(tmp_path, "start", step=4)  # resumed, then killed: only the exit is known
    append_event(tmp_path, "exit", code=137, signal=None)
    assert status(tmp_path, 7) == ("failed", "step 7 of 10: exit code 137")


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    append_event(tmp_path, "start", step=0)
    append_event(tmp_path, "end", outcome="finished", step=10)
    with open(tmp_path / "events.jsonl", "a") as fh:
        fh.write('{"event": "sta')
    assert [e["event"] for e in read_events(tmp_path)] == ["start", "end"]
    assert status(tmp_path, 10) == ("finished", "step 10 of 10")
