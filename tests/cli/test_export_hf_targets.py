"""`fsdpspec export hf RUN -o DIR` never deletes or follows what it did not create: a
user's folder, the run itself, its checkpoints, `.` and a symlink are refused by name
before torch is imported; an existing export is replaced only with --force; a checkpoint
that does not match its manifest (a truncated or a deleted shard) is one FS042 line; no
temp directory is ever left behind. On the session's trained quickstart run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from resolved_edits import relabel

from fsdpspec.cli.main import cli

pytest.importorskip("torch")


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI in this process (click's runner): torch loads once, not per call."""
    here = os.getcwd()
    os.chdir(cwd or here)
    try:
        result = CliRunner().invoke(cli, list(args))
    finally:
        os.chdir(here)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        repr(result.exception))
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (os.lstat(p).st_mode, os.lstat(p).st_size)
            for p in sorted(root.rglob("*"))}


def _one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _targets(run: Path, tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Target → (the -o argument, what its refusal says)."""
    folder = tmp_path / "my-folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    (tmp_path / "link").symlink_to(folder)
    return {
        "a user's folder": (str(folder), "it exists; pass --force to replace it"),
        "the run": (str(run), "is or holds the run directory"),
        "its checkpoints": (str(run / "checkpoints"), "is or holds the run directory"),
        "a folder holding the run": (str(run.parent), "is or holds the run directory"),
        "a symlink": (str(tmp_path / "link"), "it is a symlink, not a directory"),
    }


def test_what_export_did_not_create_is_refused_and_kept(
    trained_run: dict, tmp_path: Path
) -> None:
    run = Path(trained_run["run_dir"])
    targets = _targets(run, tmp_path)
    before, run_before = _tree(tmp_path), _tree(run)
    for name, (output, reason) in targets.items():
        for force in ([], ["--force"]):
            result = run_cli("export", "hf", str(run), "-o", output, *force)
            line = _one_error_line(result)
            if force and name == "a user's folder":
                reason = ("not a model directory (no config.json or adapter/adapter_config.json); "
                          "refusing to replace it")
            assert line == f"Error: {output}: {reason}" or reason in line, (name, line)
    dot = run_cli("export", "hf", str(run), "-o", ".", cwd=tmp_path)
    assert "it exists; pass --force" in _one_error_line(dot)
    assert _tree(tmp_path) == before and _tree(run) == run_before


def test_a_directory_that_is_not_a_run_is_refused_before_torch_loads(tmp_path: Path) -> None:
    code = ("import sys\nfrom fsdpspec.cli.main import cli\n"
            f"try:\n    cli(['export', 'hf', {str(tmp_path)!r}, '-o', "
            f"{str(tmp_path / 'out')!r}])\nexcept SystemExit as exit:\n    assert exit.code\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    lines = result.stderr.strip().splitlines()
    assert lines == [f"Error: {tmp_path}: not a run directory (no resolved-spec.json)",
                     "False"], result.stderr


def _copy_run(trained_run: dict, tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(trained_run["run_dir"], run, symlinks=True)
    newest = sorted((run / "checkpoints").glob("step-*"))[-1]
    return run, newest


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_damaged_checkpoint_is_one_coded_line_and_leaves_nothing(
    damage: str, trained_run: dict, tmp_path: Path
) -> None:
    run, newest = _copy_run(trained_run, tmp_path)
    shard = sorted(newest.glob("*.distcp"))[0]
    if damage == "truncated":
        with open(shard, "r+b") as fh:
            fh.truncate(shard.stat().st_size // 2)
    else:
        shard.unlink()
    before = _tree(tmp_path)
    line = _one_error_line(run_cli("export", "hf", str(run), "-o", str(tmp_path / "out")))
    why = "bytes, not" if damage == "truncated" else "is missing"
    assert line.startswith(f"Error: FS042 {newest} does not verify: {shard.name} ")
    assert why in line and line.endswith("nothing was written")
    assert _tree(tmp_path) == before  # no temp directory, no output


def test_an_existing_export_is_replaced_only_with_force(
    trained_run: dict, tmp_path: Path
) -> None:
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text("{}\n")  # what a previous export leaves
    refused = run_cli("export", "hf", str(trained_run["run_dir"]), "-o", str(out))
    assert "it exists; pass --force" in _one_error_line(refused)
    done = run_cli("export", "hf", str(trained_run["run_dir"]), "-o", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert (out / "model.safetensors").is_file() and (out / "config.json").stat().st_size > 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no temp, no trash left


@pytest.mark.parametrize("by", ["manifest", "tensors"])
def test_a_full_run_relabelled_as_an_adapter_is_one_coded_line(
    by: str, trained_run: dict, tmp_path: Path
) -> None:
    """An edited resolved-spec.json that adds `peft` would write a full run's weights as
    an "adapter": the checkpoint's manifest records a full model, and (a manifest
    written before it said) so do its tensors."""
    run, newest = _copy_run(trained_run, tmp_path)
    resolved = relabel(run, {"r": 4})
    if by == "tensors":
        manifest = json.loads((newest / "manifest.json").read_text())
        assert manifest.pop("holds") == {"kind": "full"}
        (newest / "manifest.json").write_text(json.dumps(manifest))
    before = _tree(tmp_path)
    line = _one_error_line(run_cli("export", "hf", str(run), "-o", str(tmp_path / "out")))
    held = "a full model" if by == "manifest" else "full-model tensors"
    assert line.startswith(f"Error: FS042 {newest} holds ") and held in line, line
    assert f"but {resolved} describes a lora adapter of r 4, alpha 16.0 on " in line
    assert line.endswith("; nothing was written")
    assert _tree(tmp_path) == before
