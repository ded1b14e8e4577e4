"""Paths in a spec (issue 11, item 5): NUL, `~nosuchuser`, symlink loops and FIFOs, also
inside a data directory, are refused at validate or pre-flight with the field's
position; none crashes `run --dry-run` or `export`, and none leaves a run directory."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import run_cli

HEAD = """\
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata: {name: paths}
resources: {gpus_per_node: 2, accelerator: cpu, host_memory_gib: 8}
model: {preset: tiny-llama}
train: {max_steps: 2}
"""


def _data(path: str) -> str:
    return (f"data: {{source: text, path: '{path}', seq_len: 32, micro_batch_size: 1, "
            "global_batch_size: 4}\n")


def _fifo_file(tmp: Path) -> str:
    os.mkfifo(tmp / "train.txt")
    return HEAD + _data("train.txt")


def _fifo_in_directory(tmp: Path) -> str:
    (tmp / "data").mkdir()
    (tmp / "data" / "a.txt").write_text("hello world\n" * 100)
    os.mkfifo(tmp / "data" / "b.txt")
    return HEAD + _data("data")


def _loop_in_directory(tmp: Path) -> str:
    (tmp / "data").mkdir()
    (tmp / "data" / "a.txt").write_text("hello world\n" * 100)
    (tmp / "data" / "b.txt").symlink_to("b.txt")
    return HEAD + _data("data")


def _loop_file(tmp: Path) -> str:
    (tmp / "train.txt").symlink_to("train.txt")
    return HEAD + _data("train.txt")


def _loop_weights(tmp: Path) -> str:
    (tmp / "w").symlink_to("w")
    return HEAD.replace("{preset: tiny-llama}", "{preset: tiny-llama, weights: w}") + (
        "data: {source: corpus, seq_len: 32, micro_batch_size: 1, global_batch_size: 4}\n")


def _fifo_in_tokenizer(tmp: Path) -> str:
    (tmp / "tok").mkdir()
    os.mkfifo(tmp / "tok" / "tokenizer.json")
    return HEAD + ("data: {source: corpus, tokenizer: tok, seq_len: 32, "
                   "micro_batch_size: 1, global_batch_size: 4}\n")


PREFLIGHT: dict[str, tuple[Callable[[Path], str], str]] = {
    "fifo-inside-tokenizer-directory": (_fifo_in_tokenizer, "job.yaml:7:"),
    "fifo-as-data-file": (_fifo_file, "job.yaml:7:"),
    "fifo-inside-data-directory": (_fifo_in_directory, "job.yaml:7:"),
    "symlink-loop-inside-data-directory": (_loop_in_directory, "job.yaml:7:"),
    "symlink-loop-as-data-file": (_loop_file, "job.yaml:7:"),
    "symlink-loop-as-weights": (_loop_weights, "job.yaml:5:"),
}
VALIDATE = {
    "nul-in-data-path": HEAD + _data("a\\0b").replace("'", '"'),
    "unknown-user-checkpoint-dir": HEAD + "checkpoint: {dir: ~nosuchuser/runs}\n",
    "unknown-user-hf-config": HEAD.replace("{preset: tiny-llama}",
                                           "{hf_config: ~nosuchuser/c.json}"),
}


def _names(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("case", PREFLIGHT)
def test_preflight_refuses_with_the_fields_position(case: str, tmp_path: Path) -> None:
    make, where = PREFLIGHT[case]
    (tmp_path / "job.yaml").write_text(make(tmp_path))
    before = _names(tmp_path)
    result = run_cli("run", "job.yaml", cwd=tmp_path, timeout=120)
    assert result.returncode == 1, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    # validate's FS407 refuses a path that does not resolve, the pre-flight the rest (a
    # FIFO, or one inside a directory): at the field's position either way.
    assert error.removeprefix("Error: ").startswith(where), error
    assert "Traceback" not in result.stderr
    assert _names(tmp_path) == before  # no half-made run directory
    for command in (["run", "--dry-run"], ["export", "slurm"], ["export", "kubernetes"]):
        other = run_cli(*command, "job.yaml", cwd=tmp_path, timeout=120)
        assert other.returncode in (0, 1) and "Traceback" not in other.stderr, command
    assert _names(tmp_path) == before


@pytest.mark.parametrize("case", VALIDATE)
@pytest.mark.parametrize("command", [["validate"], ["run"], ["run", "--dry-run"],
                                     ["export", "slurm"]])
def test_validate_refuses_with_the_fields_position(case, command, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(VALIDATE[case])
    result = run_cli(*command, "job.yaml", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert any(line.startswith("job.yaml:") and (": FS016 " in line or ": FS024 " in line)
               for line in lines), lines
    assert "Traceback" not in result.stderr
    assert _names(tmp_path) == ["job.yaml"]
