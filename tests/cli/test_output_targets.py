"""`-o` of export, import and init writes a regular file atomically, and never replaces
a FIFO, a device node, a directory or a symlink (each made for real here)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from fsdpspec.atomicio import NotARegularFile, publish_dir, write_text

QUICKSTART = ROOT / "examples" / "quickstart.yaml"
ACCELERATE = ROOT / "tests" / "convert" / "configs" / "fsdp2-qwen-ac.yaml"
COMMANDS = {
    "export": ["export", "slurm", str(QUICKSTART)],
    "import": ["import", "accelerate", str(ACCELERATE)],
    "init": ["init", "--preset", "tiny-llama", "--accelerator", "cpu"],
}


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _device(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root (CI runs as root)")
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is


def _directory(path: Path) -> None:
    path.mkdir()


def _symlink(path: Path) -> None:
    (path.parent / "real.txt").write_text("keep\n")
    path.symlink_to("real.txt")


TARGETS: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo, "device": _device, "directory": _directory, "symlink": _symlink,
}


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for path in sorted(root.rglob("*")):
        mode = os.lstat(path).st_mode
        body = path.read_bytes() if stat.S_ISREG(mode) else b""
        out[str(path.relative_to(root))] = (mode, body)
    return out


@pytest.mark.parametrize("kind", TARGETS)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_non_regular_target_is_refused_and_left_alone(
    command: str, kind: str, tmp_path: Path
) -> None:
    target = tmp_path / "out"
    TARGETS[kind](target)
    before = _tree(tmp_path)
    result = run_cli(*COMMANDS[command], "-o", str(target), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a regular file" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("command", COMMANDS)
def test_a_regular_target_is_replaced_whole_and_only_with_force(
    command: str, tmp_path: Path
) -> None:
    target = tmp_path / "out"
    target.write_text("old\n")
    refused = run_cli(*COMMANDS[command], "-o", str(target), cwd=tmp_path)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        f"Error: FS049 {target}: it exists; pass --force to replace it")
    assert target.read_text() == "old\n"
    result = run_cli(*COMMANDS[command], "-o", str(target), "--force", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert target.read_text() != "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp file left


def test_init_never_writes_through_a_dangling_symlink(tmp_path: Path) -> None:
    (tmp_path / "out").symlink_to(tmp_path / "elsewhere")
    result = run_cli(*COMMANDS["init"], "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (f"Error: FS049 {tmp_path / 'out'}: it is a symlink, not a "
                                     "regular file; refusing to replace it")
    assert not (tmp_path / "elsewhere").exists()


def test_the_writer_refuses_what_the_cli_refuses(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotARegularFile):
        write_text(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_publishing_a_directory_keeps_the_old_one_until_the_new_one_is_in_place(
    tmp_path: Path,
) -> None:
    old, new = tmp_path / "final", tmp_path / ".tmp-final"
    old.mkdir()
    (old / "a").write_text("old")
    new.mkdir()
    (new / "a").write_text("new")
    publish_dir(new, old)
    assert (old / "a").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]
    link = tmp_path / "link"
    link.symlink_to(old)
    new.mkdir()
    with pytest.raises(OSError, match="not a directory"):
        publish_dir(new, link)
    assert link.is_symlink()


# The pictures of `plan` and the page of `report` go through the same writer.
PICTURES = {
    "plan --svg": ["plan", str(QUICKSTART), "--svg"],
    "report": ["report", "RUN"],
}


def _fake_run(tmp_path: Path) -> Path:
    """A run directory as the engine leaves it, without training: the resolved spec and
    two metrics records."""
    from fsdpspec.runfiles.resolved import write_resolved_spec
    from fsdpspec.validate import check_file

    run = tmp_path / "run"
    write_resolved_spec(check_file(QUICKSTART).spec, run)
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 5.0}\n{"step": 2, "loss": 4.0}\n')
    return run


def _picture_cli(command: str, tmp_path: Path, *extra: str):
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli

    argv = [str(_fake_run(tmp_path)) if a == "RUN" else a for a in PICTURES[command]]
    return CliRunner().invoke(cli, [*argv, *extra])


@pytest.mark.parametrize("kind", TARGETS)
@pytest.mark.parametrize("command", PICTURES)
def test_a_picture_never_replaces_a_non_regular_target(
    command: str, kind: str, tmp_path: Path
) -> None:
    target = tmp_path / "out"
    TARGETS[kind](target)
    before = _tree(tmp_path)
    result = _picture_cli(command, tmp_path, "-o", str(target), "--force")
    assert result.exit_code == 1 and not isinstance(result.exception, Exception), result.output
    assert result.stderr.strip().splitlines()[-1].startswith(f"Error: FS049 {target}: it is a ")
    now = _tree(tmp_path)
    assert {k: v for k, v in now.items() if k in before} == before
    assert not [name for name in now if name.startswith(".out.")]  # no temp left


@pytest.mark.parametrize("command", PICTURES)
def test_an_existing_picture_is_replaced_only_with_force(
    command: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    default = "plan.svg" if command.startswith("plan") else "report.html"
    (tmp_path / default).write_text("old\n")
    refused = _picture_cli(command, tmp_path)
    assert refused.exit_code == 1, refused.output
    assert refused.stderr.strip().splitlines()[-1] == (
        f"Error: FS049 {default}: it exists; pass --force to replace it")
    assert (tmp_path / default).read_text() == "old\n"
    replaced = _picture_cli(command, tmp_path, "--force")
    assert replaced.exit_code in (0, 1) and "wrote" in replaced.stderr, replaced.output
    assert (tmp_path / default).read_text() != "old\n"
