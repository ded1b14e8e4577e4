"""`fsdpspec report` reads a run directory's resolved-spec.json, metrics.jsonl and
events.jsonl through the bounded reader with typed records: each hostile file is one
coded line naming the file and the line (FS040 not bounded JSON, FS041 a record of the
wrong shape), no traceback, no report written; a FIFO never blocks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, run_cli
from fsdpspec.cli.main import cli

QUICKSTART = ROOT / "examples" / "quickstart.yaml"
GOOD = '{"step": 1, "loss": 5.0}\n'
DEEP = "[" * 100_000 + "]" * 100_000


def _run(tmp_path: Path) -> Path:
    from fsdpspec.runfiles.resolved import write_resolved_spec
    from fsdpspec.validate import check_file

    run = tmp_path / "run"
    write_resolved_spec(check_file(QUICKSTART).spec, run)
    return run


CASES = {  # file, its text, the code, what the line says (after "file:line: ")
    "deep record": ("metrics.jsonl", GOOD + '{"step": 2, "x": ' + DEEP + '}\n', "FS040", 2,
                    "nested deeper than 4 levels"),
    "5000-digit step": ("metrics.jsonl", '{"step": ' + "1" * 5000 + '}\n', "FS040", 1,
                        "an integer of 5000 digits is out of range"),
    "step 10**400": ("metrics.jsonl", GOOD + '{"step": 1' + "0" * 400 + '}\n', "FS040", 2,
                     "an integer of 401 digits is out of range"),
    "step a string": ("metrics.jsonl", '{"step": "3", "loss": 1.0}\n', "FS041", 1,
                      "step must be an integer from 0 to 1000000000000"),
    "no step": ("metrics.jsonl", '{"loss": 1.0}\n', "FS041", 1, "a metrics record has no step"),
    "loss 1e308": ("metrics.jsonl", GOOD + '{"step": 2, "loss": 1e308}\n', "FS041", 2,
                   "loss is out of range"),
    "loss a list": ("metrics.jsonl", '{"step": 2, "loss": [1]}\n', "FS041", 1,
                    "loss must be a number, a string, true/false or null"),
    "not an object": ("metrics.jsonl", "[1, 2]\n", "FS040", 1, "not a JSON object"),
    "event unknown": ("events.jsonl", '{"event": 5}\n', "FS041", 1,
                      "event must be one of checkpoint, end, exit, start"),
    "event step negative": ("events.jsonl", '{"event": "start", "step": -1}\n', "FS041", 1,
                            "step must be an integer from 0 to 1000000000000"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_run_record_is_one_coded_line(case: str, tmp_path: Path) -> None:
    name, text, code, line, reason = CASES[case]
    run = _run(tmp_path)
    (run / name).write_text(text)
    result = CliRunner().invoke(cli, ["report", str(run), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 1 and not isinstance(result.exception, Exception), result.output
    assert result.stderr == f"Error: {code} {run / name}:{line}: {reason}\n"
    assert not (tmp_path / "r.html").exists()


def test_a_hostile_resolved_spec_is_one_coded_line(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (run / "resolved-spec.json").write_text('{"spec": ' + DEEP + "}")
    result = CliRunner().invoke(cli, ["report", str(run), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 1 and not isinstance(result.exception, Exception)
    assert result.stderr == (f"Error: FS040 {run / 'resolved-spec.json'}: nested deeper than "
                             "16 levels\n")


def test_a_non_finite_loss_is_a_record_and_is_drawn_without_it(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (run / "metrics.jsonl").write_text(GOOD + '{"step": 2, "loss": NaN}\n')
    result = CliRunner().invoke(cli, ["report", str(run), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output


def test_a_fifo_in_the_run_directory_never_blocks_the_report(tmp_path: Path) -> None:
    run = _run(tmp_path)
    os.mkfifo(run / "metrics.jsonl")
    result = run_cli("report", str(run), "-o", str(tmp_path / "r.html"), timeout=30)
    assert result.returncode == 1
    assert result.stderr == (f"Error: FS040 {run / 'metrics.jsonl'} is a FIFO, device or "
                             "socket, not a regular file\n")


def test_a_resolved_spec_whose_memory_overflows_is_one_line(tmp_path: Path) -> None:
    import json

    run = _run(tmp_path)
    document = json.loads((run / "resolved-spec.json").read_text())
    document["spec"]["resources"]["host_memory_gib"] = 1e300
    (run / "resolved-spec.json").write_text(json.dumps(document))
    result = CliRunner().invoke(cli, ["report", str(run), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 1 and not isinstance(result.exception, Exception)
    assert result.stderr.startswith(f"Error: FS040 {run / 'resolved-spec.json'}: not a valid "
                                    "spec: resources.host_memory_gib: Input should be less")
