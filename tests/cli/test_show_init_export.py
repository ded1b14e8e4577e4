"""`fsdpspec show`, `fsdpspec init` and the `export` command line: origins, starter specs
that validate clean, one-line errors and no half-written files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from fsdpspec.validate import check_file

QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def shown(*args: str) -> dict[str, str]:
    """`fsdpspec show` output as "section.field" → "value  # origin"."""
    result = run_cli("show", *args)
    assert result.returncode == 0, result.stderr
    values, section = {}, ""
    for line in result.stdout.splitlines():
        match = re.match(r"^( *)([a-z_A-Z]+):(.*)$", line)
        if not match:
            continue
        indent, key, rest = match.groups()
        if not indent:
            section = key
        if "#" in rest:
            value, origin = rest.split("#", 1)
            values[f"{section}.{key}" if indent else key] = f"{value.strip()} # {origin.strip()}"
    return values


def test_show_marks_every_value_with_its_origin() -> None:
    values = shown(str(QUICKSTART), "--set", "train.max_steps=30")
    lines = QUICKSTART.read_text().splitlines()
    seq_line = next(i for i, text in enumerate(lines, 1) if "seq_len:" in text)
    assert values["data.seq_len"] == f"128 # {QUICKSTART}:{seq_line}"
    assert values["train.max_steps"] == "30 # --set train.max_steps=30"
    assert values["launch.backend"] == "auto # default"
    # A shorthand's expansion points at the line of the shorthand.
    precision_line = next(i for i, text in enumerate(lines, 1) if "mixed_precision" in text)
    assert values["fsdp.param_dtype"] == f"float32 # {QUICKSTART}:{precision_line}"


def test_show_stops_on_errors() -> None:
    result = run_cli("show", str(QUICKSTART), "--set", "fsdp.version=3")
    assert result.returncode == 1 and "FS023" in result.stdout + result.stderr


@pytest.mark.parametrize("flags", [
    [],
    ["--preset", "llama3-8b", "--accelerator", "H100-80GB"],
    ["--preset", "qwen2.5-7b", "--accelerator", "A100-80GB", "--gpus", "8"],
    ["--preset", "llama3-70b", "--accelerator", "H100-80GB", "--nodes", "4"],
    ["--preset", "tiny-qwen2", "--gpus", "4"],
], ids=["default", "llama3-8b", "qwen", "multinode", "tiny-qwen"])
def test_init_writes_a_spec_that_validates_clean(flags: list[str], tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    result = run_cli("init", *flags, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_text().startswith("# Starter spec written by `fsdpspec init`")
    assert check_file(out).diagnostics == []


def test_init_refuses_what_would_not_validate(tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    result = run_cli("init", "--preset", "llama3-70b", "--accelerator", "L4", "--gpus", "1",
                     "-o", str(out))
    assert result.returncode == 1
    assert "starter spec:" in result.stderr and "would not validate" in result.stderr
    assert not out.exists()


def test_init_refuses_an_existing_file_without_force(tmp_path: Path) -> None:
    """`fsdpspec init -o FILE` behaves as every other `-o`: an existing file is one coded
    line and left as it was; --force replaces it with a spec that validates."""
    (tmp_path / "job.yaml").write_text("mine\n")
    refused = run_cli("init", "-o", "job.yaml", cwd=tmp_path)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "Error: FS049 job.yaml: it exists; pass --force to replace it"]
    assert (tmp_path / "job.yaml").read_text() == "mine\n"
    replaced = run_cli("init", "-o", "job.yaml", "--force", cwd=tmp_path)
    assert replaced.returncode == 0, replaced.stderr
    assert check_file(tmp_path / "job.yaml").diagnostics == []


def test_init_rejects_a_bad_name() -> None:
    result = run_cli("init", "--name", "my job")
    assert result.returncode == 2 and "--name" in result.stderr


@pytest.mark.parametrize("target", ["slurm", "accelerate"])
def test_export_writes_whole_files(target: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("export", target, str(QUICKSTART), "-o", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.read_text() and [p.name for p in tmp_path.iterdir()] == ["out"]
    assert bool(out.stat().st_mode & 0o100) == (target == "slurm")


@pytest.mark.parametrize("args", [
    ["export", "kubernetes", str(QUICKSTART)],
    ["export", "slurm", str(QUICKSTART), "--set", "launch.slurm.partition=a b"],
    ["export", "accelerate", str(QUICKSTART), "-o", "/nonexistent/dir/x.yaml"],
    ["import", "accelerate", "/nonexistent.yaml"],
])
def test_bad_input_is_one_line_and_writes_nothing(args: list[str], tmp_path: Path) -> None:
    result = run_cli(*args, "-o", str(tmp_path / "out")) if "-o" not in args else run_cli(*args)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert list(tmp_path.iterdir()) == []
