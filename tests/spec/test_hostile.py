"""Hostile input: every file under tests/cases/hostile/ is refused by every command that
reads a spec — exit 1 (2 for usage), one line per problem, no traceback, nothing written.
The CLI runs in-process (click's runner) so that 4 × 50 invocations stay fast; the
latency per file is measured by benchmarks/hostile_latency.py."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import CASES
from fsdpspec.cli.main import cli

HOSTILE = sorted((CASES / "hostile").glob("*.yaml"))
COMMANDS = (["validate"], ["plan"], ["show"], ["run", "--dry-run"])
LINE = re.compile(r"^\S.*:\d+:\d+: FS\d{3} (error|warning|info) \S")


def test_corpus_is_large_enough() -> None:
    assert len(HOSTILE) >= 40


@pytest.mark.parametrize("case", HOSTILE, ids=lambda p: p.stem)
def test_every_command_refuses_cleanly(case: Path, tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    spec = work / case.name
    shutil.copyfile(case, spec)
    monkeypatch.chdir(work)
    for command in COMMANDS:
        result = CliRunner().invoke(cli, [*command, "--format", "concise", spec.name]
                                    if command == ["validate"] else [*command, spec.name])
        output = result.output
        assert result.exit_code in (1, 2), (command, output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            command, repr(result.exception))
        assert "Traceback" not in output
        problems = [line for line in output.splitlines() if line.strip()]
        assert problems, command
        assert all(LINE.match(line) for line in problems), (command, problems)
        assert sorted(p.name for p in work.iterdir()) == [case.name], command
