"""`fsdpspec run` on a terminal draws a live progress bar (step/total, ETA, loss, tokens/s,
MFU, last checkpoint); without one it prints plain log lines. The last step is always
logged. Both from a real 2-process CPU run (the ``trained_run`` fixture)."""

from __future__ import annotations

import re

import pytest

# A real 2-process training run (the trained_run fixture, ~40 s on 2 cores).
pytestmark = pytest.mark.slow

ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def screen_lines(terminal: str) -> list[str]:
    """What was drawn, one redraw a line: escapes dropped, carriage returns as breaks."""
    return ESCAPE.sub("", terminal).replace("\r", "\n").splitlines()


def test_a_terminal_gets_a_live_progress_bar(trained_run: dict) -> None:
    lines = screen_lines(trained_run["terminal"])
    bar = [line for line in lines if line.startswith("quickstart") and "6/6" in line]
    assert bar, lines
    last = bar[-1]
    for part in ("eta", "loss ", "tok/s ", "mfu ", "ckpt step-00000006"):
        assert part in last, last
    # The protocol lines feed the bar; they never reach the screen.
    assert not any("fsdpspec-progress" in line for line in lines)
    # The engine's other lines still print, above the bar.
    assert any(line.startswith("checkpoint: ") for line in lines)
    assert any(line.startswith("final weights: ") for line in lines)


def test_the_last_step_is_logged_even_off_the_interval(trained_run: dict) -> None:
    steps = [line for line in screen_lines(trained_run["terminal"]) if line.startswith("step ")]
    # On the terminal the bar replaces the step lines, but the last is printed.
    assert len(steps) == 1 and steps[0].startswith("step 6/6  loss "), steps


def test_without_a_terminal_plain_lines(trained_run: dict) -> None:
    plain = trained_run["plain"]
    steps = re.findall(r"^step (\d+)/12  loss ", plain, re.MULTILINE)
    assert steps == ["8", "12"], plain  # every 4 steps, and the last
    assert "\x1b[" not in plain and "fsdpspec-progress" not in plain
