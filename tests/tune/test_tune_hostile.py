"""`fsdpspec tune` against what a hostile or broken environment hands it, as a user types
it: a planted link or foreign directory where `--measure` trains, an `-o` it cannot write,
and `--calibration` files that are not calibrations. Each is one line, before anything
trains, and nothing outside tune's own output is touched."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from fsdpspec.tune.rundirs import RECORD, NotMadeByTune, fresh_dir

TINY = Path(__file__).parent / "tiny-job.yaml"
TUNE_DIR = Path("runs") / "tune-tiny-tune"  # beside the tiny job's run directory


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """The tiny job in an empty directory, with a calibration to reuse (so that a
    refusal is the first thing --measure does: nothing calibrates)."""
    (tmp_path / "job.yaml").write_text(TINY.read_text())
    (tmp_path / "cal.yaml").write_text("resources:\n  accelerator: cpu\n")
    return tmp_path


def _measure(cwd: Path, calibration: str = "cal.yaml") -> subprocess.CompletedProcess:
    return run_cli("tune", "job.yaml", "--measure", "1", "--steps", "2", "--rounds", "1",
                   "--calibration", calibration, cwd=cwd, timeout=30)


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("planted", ["symlink", "directory"])
def test_measure_refuses_a_candidate_directory_it_did_not_make(job: Path,
                                                               planted: str) -> None:
    precious = job / "precious"
    precious.mkdir()
    (precious / "data.txt").write_text("keep\n")
    (job / TUNE_DIR).mkdir(parents=True)
    candidate = job / TUNE_DIR / "candidate-1"
    if planted == "symlink":
        candidate.symlink_to(precious, target_is_directory=True)
    else:
        shutil.copytree(precious, candidate)
    kind = "a symlink" if planted == "symlink" else "a directory `fsdpspec tune` did not make"
    assert _one_line_error(_measure(job)) == (
        f"Error: {TUNE_DIR / 'candidate-1'} exists and is {kind}: refusing to replace it; "
        "move it away, or point checkpoint.dir elsewhere")
    assert (precious / "data.txt").read_text() == "keep\n"
    assert (candidate / "data.txt").read_text() == "keep\n"
    assert not (job / TUNE_DIR / "calibration-run").exists()  # nothing ran


def test_a_directory_tune_made_is_replaced_and_a_link_swapped_in_is_not(
        tmp_path: Path) -> None:
    """The second round's fresh_dir removes the first round's run (recorded), and only
    it: a link put where it was is refused, and its target survives."""
    folder = tmp_path / "runs" / "job-tune"
    first = fresh_dir(folder, "candidate-1")
    (first / "metrics.jsonl").write_text("{}\n")
    again = fresh_dir(folder, "candidate-1")
    assert again == first and list(again.iterdir()) == []
    assert (folder / RECORD).read_text() == '{"made": ["candidate-1"]}\n'
    shutil.rmtree(again)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data.txt").write_text("keep\n")
    again.symlink_to(precious, target_is_directory=True)
    with pytest.raises(NotMadeByTune, match="exists and is a symlink"):
        fresh_dir(folder, "candidate-1")
    assert (precious / "data.txt").read_text() == "keep\n"


def test_o_with_a_name_of_the_longest_length_is_written(job: Path) -> None:
    """255 bytes is the longest name a file can have: the writer's temp name beside it
    is bounded, so such a name is written, not refused (or a traceback)."""
    name = "w" * 250 + ".yaml"
    result = run_cli("tune", "job.yaml", "-o", name, cwd=job)
    assert result.returncode == 0, result.stderr
    assert (job / name).read_text().startswith("# `tune --measure`")
    assert sorted(p.name for p in job.iterdir()) == ["cal.yaml", "job.yaml", name]


def test_o_into_a_read_only_directory_is_one_line(job: Path) -> None:
    folder = job / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    argv = ["tune", "job.yaml", "-o", "read-only/best.yaml"]
    if os.geteuid() == 0 and shutil.which("setpriv"):  # root writes anywhere: drop that
        argv = ["--bounding-set=-dac_override,-dac_read_search",
                "--inh-caps=-dac_override,-dac_read_search", "fsdpspec", *argv]
        result = subprocess.run(["setpriv", *argv], cwd=job, capture_output=True,
                                text=True, timeout=60, check=False)
    else:
        result = run_cli(*argv, cwd=job)
    assert _one_line_error(result) == "Error: FS049 read-only/best.yaml: Permission denied"
    assert list(folder.iterdir()) == []


def _laughs(path: Path) -> None:
    """Nine aliases deep, nine wide: 9**9 nodes once expanded."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    path.write_text("\n".join(lines) + "\nresources: {accelerator: *l8}\n")


def test_calibration_that_is_a_fifo_a_device_or_an_alias_bomb_is_one_coded_line(
        job: Path) -> None:
    os.mkfifo(job / "fifo.yaml")
    _laughs(job / "laughs.yaml")
    assert _one_line_error(_measure(job, "fifo.yaml")) == \
        "Error: fifo.yaml:1:1: FS001 fifo.yaml is not a regular file"
    assert _one_line_error(_measure(job, "/dev/zero")) == \
        "Error: /dev/zero:1:1: FS001 /dev/zero is not a regular file"
    assert _one_line_error(_measure(job, "laughs.yaml")) == (
        "Error: laughs.yaml:1:5: FS009 document expands to more than 20000 nodes (an alias "
        "expansion bomb?)")


@pytest.mark.parametrize(("resources", "key", "at"), [
    ('  "memory_headroom=0.5 #": 1\n', "memory_headroom=0.5 #", "2:3"),
    ("  accelerator: cpu\n  memory_headroom: 0.5\n", "memory_headroom", "3:3"),
])
def test_calibration_applies_only_the_fields_a_calibration_sets(
        job: Path, resources: str, key: str, at: str) -> None:
    """A key is matched exactly, never formatted into a `--set` line: one holding `=`
    and `#` would set another field (resources.memory_headroom)."""
    (job / "cal.yaml").write_text("resources:\n" + resources)
    assert _one_line_error(_measure(job)) == (
        f"Error: cal.yaml:{at}: FS020 resources.{key} is not a calibrated field (only "
        "accelerator, performance)")
    assert not (job / TUNE_DIR / "calibration-run").exists()
