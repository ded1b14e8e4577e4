"""Issue 29's output targets and reports, as a user types them: an `-o` never replaces
an existing file without --force nor an input of the same command; a 300-byte name is
one coded line in every writer; `report` of a hostile or huge run directory; `--set
KEY=null`; `plan` with several pictures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, run_cli
from fsdpspec.cli.main import cli

QUICKSTART = ROOT / "examples" / "quickstart.yaml"
ACCELERATE = ROOT / "tests" / "convert" / "configs" / "fsdp2-qwen-ac.yaml"
LONG = "a" * 300  # over NAME_MAX (255 bytes)


def _cli(*argv: str):
    result = CliRunner().invoke(cli, list(argv))
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit), result.exception
    return result


def _refusal(result) -> str:
    """The one line a refused command prints."""
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_export_slurm_never_replaces_its_own_spec(tmp_path: Path) -> None:
    spec = tmp_path / "gpu.yaml"
    spec.write_bytes(QUICKSTART.read_bytes())
    for force in ((), ("--force",)):
        result = run_cli("export", "slurm", "gpu.yaml", "-o", "gpu.yaml", *force, cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip() == ("Error: FS049 gpu.yaml: it is an input of this "
                                         "command; write the output elsewhere")
    assert spec.read_bytes() == QUICKSTART.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.yaml"]


@pytest.mark.parametrize("target", ["slurm", "accelerate"])
def test_export_never_replaces_its_spec_through_a_link_nor_an_existing_file(
    target: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "gpu.yaml"
    spec.write_bytes(QUICKSTART.read_bytes())
    os.link(spec, tmp_path / "hard.yaml")
    (tmp_path / "link.yaml").symlink_to("gpu.yaml")
    for source, output in (("link.yaml", "gpu.yaml"), ("gpu.yaml", "hard.yaml")):
        line = _refusal(_cli("export", target, source, "-o", output, "--force"))
        assert line == f"Error: FS049 {output}: it is an input of this command; write the " \
            "output elsewhere"
    (tmp_path / "old.txt").write_text("old\n")
    line = _refusal(_cli("export", target, "gpu.yaml", "-o", "old.txt"))
    assert line == "Error: FS049 old.txt: it exists; pass --force to replace it"
    assert (tmp_path / "old.txt").read_text() == "old\n"
    assert spec.read_bytes() == QUICKSTART.read_bytes()
    assert _cli("export", target, "gpu.yaml", "-o", "old.txt", "--force").exit_code == 0
    assert (tmp_path / "old.txt").read_text() != "old\n"


def test_import_replaces_only_with_force_and_never_its_source(tmp_path: Path,
                                                              monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "acc.yaml"
    source.write_bytes(ACCELERATE.read_bytes())
    line = _refusal(_cli("import", "accelerate", "acc.yaml", "-o", "acc.yaml", "--force"))
    assert line == "Error: FS049 acc.yaml: it is an input of this command; write the " \
        "output elsewhere"
    assert source.read_bytes() == ACCELERATE.read_bytes()
    (tmp_path / "job.yaml").write_text("old\n")
    line = _refusal(_cli("import", "accelerate", "acc.yaml", "-o", "job.yaml"))
    assert line == "Error: FS049 job.yaml: it exists; pass --force to replace it"
    assert (tmp_path / "job.yaml").read_text() == "old\n"
    replaced = _cli("import", "accelerate", "acc.yaml", "-o", "job.yaml", "--force")
    assert replaced.exit_code == 0 and "apiVersion: fsdpspec/v1" in (
        tmp_path / "job.yaml").read_text()


def _fake_run(root: Path, metrics: str = '{"step": 1, "loss": 5.0}\n') -> Path:
    """A run directory as the engine leaves it, without training."""
    from fsdpspec.runfiles.resolved import write_resolved_spec
    from fsdpspec.validate import check_file

    run = root / "run"
    write_resolved_spec(check_file(QUICKSTART).spec, run)
    (run / "metrics.jsonl").write_text(metrics)
    return run


WRITERS = {
    "init": ["init"],
    "export": ["export", "slurm", str(QUICKSTART)],
    "import": ["import", "accelerate", str(ACCELERATE)],
    "plan --svg": ["plan", str(QUICKSTART), "--svg"],
    "report": ["report", "RUN"],
}


@pytest.mark.parametrize("where", [f"d/{LONG}", f"{LONG}/x", f"d/{LONG}/x"])
@pytest.mark.parametrize("command", WRITERS)
def test_a_300_byte_name_is_one_coded_line(command: str, where: str, tmp_path: Path,
                                           monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    run = str(_fake_run(tmp_path)) if command == "report" else ""
    argv = [run if arg == "RUN" else arg for arg in WRITERS[command]]
    before = sorted(os.listdir(tmp_path / "d"))
    line = _refusal(_cli(*argv, "-o", where))
    assert line == f"Error: FS049 {where}: File name too long"
    assert sorted(os.listdir(tmp_path / "d")) == before


def test_report_of_a_checkpoint_record_without_a_step_is_one_line(tmp_path: Path) -> None:
    run = _fake_run(tmp_path)
    (run / "events.jsonl").write_text('{"event": "start", "step": 0}\n'
                                      '{"event": "checkpoint", "path": "x"}\n')
    line = _refusal(_cli("report", str(run), "-o", str(tmp_path / "r.html")))
    assert line == (f"Error: FS041 {run / 'events.jsonl'}:2: a checkpoint record has no step")
    assert not (tmp_path / "r.html").exists()


def test_report_is_not_hung_by_a_fifo_lock(tmp_path: Path) -> None:
    run = _fake_run(tmp_path)
    os.mkfifo(run / ".fsdpspec-run.lock")
    # A subprocess with a timeout: before, the report blocked opening the FIFO.
    result = run_cli("report", str(run), "-o", "r.html", cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "not started" in (tmp_path / "r.html").read_text()


def test_report_streams_a_large_metrics_file_and_thins_its_curves(tmp_path: Path,
                                                                   monkeypatch) -> None:
    from fsdpspec.charts import rundata
    from fsdpspec.charts.run_charts import DRAWN_KEYS

    lines = 6_000  # thinned twice: 2 × MAX_POINTS is 2000
    run = _fake_run(tmp_path, "".join(f'{{"step": {s}, "loss": {1000.0 / s}, '
                                      f'"peak_rss_gib": {s % 97 / 10}}}\n'
                                      for s in range(1, lines + 1)))
    result = _cli("report", str(run), "-o", str(tmp_path / "r.html"))
    assert result.exit_code == 0, result.output
    metrics = rundata.read_run(run, DRAWN_KEYS).metrics
    loss = metrics.curves["loss"]
    steps, values = loss.points()
    assert len(steps) <= 2 * rundata.MAX_POINTS + 1 and loss.seen == lines
    assert steps[0] == 1 and steps[-1] == lines and values[-1] == 1000.0 / lines
    assert loss.peak == 1000.0
    gaps = {b - a for a, b in zip(steps[:-2], steps[1:-1], strict=True)}
    assert gaps == {loss.stride} and loss.stride >= lines // (2 * rundata.MAX_POINTS)
    assert metrics.peak("peak_rss_gib") == 9.6  # the largest of all, not of the points kept


def test_set_null_clears_a_section_as_the_example_documents() -> None:
    # examples/lora-llama3-8b-l40s.yaml: "the full fine-tune (`--set peft=null`) does not fit".
    result = run_cli("plan", "examples/lora-llama3-8b-l40s.yaml", "--set", "peft=null")
    assert result.returncode == 1, result.stderr
    assert "file is empty" not in result.stderr
    assert "optimizer states               59.83" in result.stdout  # all 8B parameters


def test_plan_writes_every_picture_asked_for_and_says_so(tmp_path: Path,
                                                         monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = _cli("plan", str(QUICKSTART), "--html", "--svg", "--png", "-o", "mem")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == ["wrote mem.html", "wrote mem.svg", "wrote mem.png"]
    assert (tmp_path / "mem.html").read_text().startswith("<!DOCTYPE html>")
    assert "<svg" in (tmp_path / "mem.svg").read_text()
    assert (tmp_path / "mem.png").read_bytes().startswith(b"\x89PNG")
    # Issue 42: `-o pic.out`, a suffix that is no picture's, names all three.
    result = _cli("plan", str(QUICKSTART), "--html", "--svg", "--png", "-o", "pic.out")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "wrote pic.out.html", "wrote pic.out.svg", "wrote pic.out.png"]
    # One existing target refuses them all, before any is written.
    (tmp_path / "other.png").write_text("old\n")
    line = _refusal(_cli("plan", str(QUICKSTART), "--svg", "--png", "-o", "other.svg"))
    assert line == "Error: FS049 other.png: it exists; pass --force to replace it"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("other")) == [
        "other.png"]


def test_an_output_is_never_a_file_the_spec_reads(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.json"
    config.write_bytes((ROOT / "tests" / "models" / "llama" / "config.json").read_bytes())
    spec = QUICKSTART.read_text().replace("preset: tiny-llama", "hf_config: config.json")
    (tmp_path / "job.yaml").write_text(spec)
    before = config.read_bytes()
    line = _refusal(_cli("plan", "job.yaml", "--svg", "-o", "config.json", "--force"))
    assert line == "Error: FS049 config.json: it is an input of this command; write the " \
        "output elsewhere"
    assert config.read_bytes() == before
