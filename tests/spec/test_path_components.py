"""A path component longer than a file name can be (300 bytes) is checked once, before
anything stats it: in every input-path field it is FS024 at the field's position, and as
any command's -o (or a run directory) it is one line — never `OSError: File name too
long`."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT
from fsdpspec.cli.main import cli
from fsdpspec.validate import check_file

LONG = "a" * 300
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
HEAD = "apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: job}\n"
FIELDS = {  # field → (the spec's body, line, column of the value)
    "model.hf_config": (f"model: {{hf_config: {LONG}}}\n", 4, 20),
    "model.weights": (f"model: {{preset: tiny-llama, weights: x/{LONG}}}\n", 4, 38),
    "data.path": (f"model: {{preset: tiny-llama}}\ndata: {{source: jsonl, path: {LONG}}}\n",
                  5, 29),
    "data.eval.path": ("model: {preset: tiny-llama}\n"
                       f"data: {{source: dataset, path: d, eval: {{path: {LONG}}}}}\n", 5, 47),
    "data.tokenizer": ("model: {preset: tiny-llama}\n"
                       f"data: {{source: corpus, tokenizer: {LONG}/x}}\n", 5, 35),
    "checkpoint.dir": (f"model: {{preset: tiny-llama}}\ncheckpoint: {{dir: {LONG}}}\n", 5, 19),
    "checkpoint.resume": (f"model: {{preset: tiny-llama}}\ncheckpoint: {{resume: {LONG}}}\n",
                          5, 22),
}


@pytest.mark.parametrize("field", FIELDS)
def test_a_long_component_is_fs024_at_the_field(field: str, tmp_path: Path) -> None:
    body, line, col = FIELDS[field]
    (tmp_path / "job.yaml").write_text(HEAD + body)
    found = [(d.code, d.position.line, d.position.col, d.message)
             for d in check_file(tmp_path / "job.yaml").diagnostics if d.is_error]
    assert found == [("FS024", line, col, f"{field} has a component of 300 bytes "
                      f"({'a' * 24}…); names are at most 255")]



@pytest.mark.parametrize("field", [f for f in FIELDS if f != "checkpoint.resume"])
def test_an_unknown_user_is_fs024_at_every_input_and_the_run_directory(
        field: str, tmp_path: Path) -> None:
    """The fields come from the one input table (spec.v1.INPUT_FIELDS); data.eval.path was
    missing from this check while it kept a list of its own."""
    body, line, col = FIELDS[field]
    body = body.replace(f"x/{LONG}", LONG).replace(f"{LONG}/x", LONG)
    (tmp_path / "job.yaml").write_text(HEAD + body.replace(LONG, "~nosuchuser9/x"))
    found = [(d.code, d.position.line, d.position.col, d.message)
             for d in check_file(tmp_path / "job.yaml").diagnostics if d.is_error]
    assert found == [("FS024", line, col, f"{field}: ~nosuchuser9 names no user on this "
                      "machine")]

COMMANDS = {
    "export slurm": ["export", "slurm", QUICKSTART, "-o", LONG],
    "init": ["init", "--preset", "tiny-llama", "-o", LONG],
    "plan --svg": ["plan", QUICKSTART, "--svg", "-o", LONG],
    "report -o": ["report", "RUN", "-o", LONG],
    "report RUN": ["report", LONG],
    "export hf RUN": ["export", "hf", LONG, "-o", "out"],
    "export hf -o": ["export", "hf", "RUN", "-o", LONG],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_long_output_or_run_name_is_one_line(command: str, tmp_path: Path,
                                               monkeypatch) -> None:
    from fsdpspec.runfiles.resolved import write_resolved_spec

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    write_resolved_spec(check_file(Path(QUICKSTART)).spec, run)
    argv = [str(run) if a == "RUN" else a for a in COMMANDS[command]]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 1 and not isinstance(result.exception, Exception), (
        repr(result.exception))
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "File name too long" in lines[0] or "not a run directory" in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
