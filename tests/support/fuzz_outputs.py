"""Hypothesis strategies and checks for two channels of benchmarks/fuzz.py (issue 29):
every command's `-o` on a hostile target (the command's own input, a link to it, a FIFO,
a 300-byte name …), and `report` of a hostile or large run directory. Each check runs
the CLI in-process and raises (a crash) on a traceback, a refusal that is not one coded
line, a write that replaced what the rule keeps, or a curve that kept more points than
its bound."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from fuzz_files import snapshot
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
ACCELERATE = ROOT / "tests" / "convert" / "configs" / "fsdp2-qwen-ac.yaml"

# command → (argv before -o, with INPUT for the input file, and the input's source)
COMMANDS = {
    "init": (["init"], None),
    "export slurm": (["export", "slurm", "INPUT"], QUICKSTART),
    "export accelerate": (["export", "accelerate", "INPUT"], QUICKSTART),
    "import accelerate": (["import", "accelerate", "INPUT"], ACCELERATE),
    "plan --svg": (["plan", "INPUT", "--svg"], QUICKSTART),
    "report": (["report", "RUN"], None),
}
TARGETS = ["new", "existing file", "the input", "a hard link to the input",
           "the input through a linked directory", "a symlink to the input", "fifo",
           "directory", "dangling symlink", "300-byte name", "300-byte directory",
           "missing directory", "newline in the name", "NUL in the name"]


@st.composite
def command_targets(draw) -> tuple[str, str, bool]:
    """(command, what its -o names, --force)."""
    return (draw(st.sampled_from(sorted(COMMANDS))), draw(st.sampled_from(TARGETS)),
            draw(st.booleans()))


@functools.cache
def _quickstart_spec() -> Any:
    from fsdpspec.validate import check_file

    return check_file(QUICKSTART).spec


def _run_dir(root: Path) -> Path:
    from fsdpspec.runfiles.resolved import write_resolved_spec

    run = root / "run"
    write_resolved_spec(_quickstart_spec(), run)
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 5.0}\n')
    return run


def _target(kind: str, work: Path, source: Path) -> str:
    """Make what ``kind`` says in ``work``; the -o argument naming it."""
    if kind == "the input":
        return str(source)
    if kind == "a hard link to the input":
        os.link(source, work / "hard")
        return str(work / "hard")
    if kind == "the input through a linked directory":
        (work / "via").symlink_to(source.parent)
        return str(work / "via" / source.name)
    if kind == "a symlink to the input":
        (work / "link").symlink_to(source)
        return str(work / "link")
    named = {"300-byte name": "a" * 300, "300-byte directory": "a" * 300 + "/out",
             "missing directory": "missing/out", "newline in the name": "out\nx",
             "NUL in the name": "out\x00x"}
    target = work / named.get(kind, "out")
    if kind == "existing file":
        target.write_text("old\n")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "dangling symlink":
        target.symlink_to(work / "gone")
    return str(target)


def check_command_target(example: tuple[str, str, bool], directory: Path) -> None:
    """The command on the target: written only where the rule allows, else exit 1 with
    one line; the inputs and everything outside the target unchanged either way."""
    from fsdpspec.cli.main import cli

    command, kind, force = example
    work = directory / "work"
    work.mkdir()
    argv, seed = COMMANDS[command]
    run = _run_dir(directory)
    source = work / "input.yaml"
    source.write_bytes(seed.read_bytes() if seed else b"")
    if command == "report":
        source = run / "resolved-spec.json"
    output = _target(kind, work, source)
    before = snapshot(directory)
    argv = [{"INPUT": str(work / "input.yaml"), "RUN": str(run)}.get(a, a) for a in argv]
    result = CliRunner().invoke(cli, [*argv, "-o", output, *(["--force"] if force else [])])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        example, repr(result.exception))
    after = snapshot(directory)
    if kind in ("new", "newline in the name") or (kind == "existing file" and force):
        assert result.exit_code == 0, (example, result.output)
        changed = {name for name in after if after[name] != before.get(name)}
        assert changed == {os.path.relpath(output, directory)}, (example, changed)
        return
    assert result.exit_code == 1, (example, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), (example, result.stderr)
    assert lines[0].startswith("Error: FS049 "), (example, lines)
    assert after == before, example


RECORD_VALUES = st.one_of(
    st.floats(allow_nan=True), st.integers(-(2**40), 2**40), st.booleans(), st.none(),
    st.text(max_size=8), st.just(1e30), st.just(-1e30))
DRAWN = ["loss", "eval_loss", "lr", "grad_norm", "tokens_per_s", "mfu",
         "peak_mem_allocated_gib", "peak_mem_reserved_gib", "peak_rss_gib"]
EVENT_KINDS = ["start", "checkpoint", "end", "exit", "other"]
NODES = ["absent", "regular", "fifo", "directory", "symlink to /dev/zero", "dangling symlink"]


@st.composite
def hostile_runs(draw) -> dict[str, Any]:
    """A run directory's records: many lines of odd values, events in any order (a
    checkpoint without a step, thousands of resumes), and what metrics.jsonl, events.jsonl
    and the run lock are (a FIFO, a directory, a link)."""
    record = st.fixed_dictionaries(
        {"step": st.one_of(st.integers(0, 10**6), RECORD_VALUES)},
        optional={key: RECORD_VALUES for key in DRAWN})
    event = st.fixed_dictionaries(
        {"event": st.sampled_from(EVENT_KINDS)},
        optional={"step": st.one_of(st.integers(0, 10**6), RECORD_VALUES),
                  "outcome": st.sampled_from(["finished", "stopped", "failed", 3]),
                  "code": st.integers(-1, 255), "signal": st.sampled_from([None, "SIGTERM"]),
                  "message": st.text(max_size=20)})
    return {
        "metrics": draw(st.lists(record, max_size=8)),
        "repeat": draw(st.sampled_from([1, 1, 10, 3000])),  # the lines, this many times
        "events": draw(st.lists(event, max_size=6)),
        "resumes": draw(st.sampled_from([0, 0, 500])),
        "torn": draw(st.booleans()),
        "nodes": {name: draw(st.sampled_from(NODES))
                  for name in ("metrics.jsonl", "events.jsonl", ".fsdpspec-run-0.lock")},
        "render": draw(st.integers(0, 19)) == 0,  # drawing is the slow part: 1 in 20
    }


def _lines(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, allow_nan=True) + "\n" for r in records)


def _place(path: Path, node: str, text: str) -> None:
    if node == "regular":
        path.write_text(text)
    elif node == "fifo":
        os.mkfifo(path)
    elif node == "directory":
        path.mkdir()
    elif node == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    elif node == "dangling symlink":
        path.symlink_to(path.parent / "gone")


def check_hostile_run(example: dict[str, Any], directory: Path) -> None:
    """read_run gives bounded curves or one coded line; a report drawn from it (1 in 20)
    is written, or refused in one coded line; nothing in the run directory changes."""
    from fsdpspec.charts.run_charts import DRAWN_KEYS
    from fsdpspec.charts.rundata import MAX_POINTS, RunDataError, read_run
    from fsdpspec.cli.main import cli

    run = _run_dir(directory)
    starts = [{"event": "start", "step": s + 1} for s in range(example["resumes"])]
    texts = {"metrics.jsonl": _lines(example["metrics"]) * example["repeat"],
             "events.jsonl": _lines(example["events"] + starts) + (
                 '{"event": "sta' if example["torn"] else ""),
             ".fsdpspec-run-0.lock": ""}
    for name, node in example["nodes"].items():
        (run / name).unlink(missing_ok=True)
        _place(run / name, node, texts[name])
    before = snapshot(directory)
    try:
        data = read_run(run, DRAWN_KEYS)
    except RunDataError as exc:
        assert "\n" not in str(exc) and str(exc).split()[0] in ("FS040", "FS041"), str(exc)
        data = None
    if data is not None:
        for curve in data.metrics.curves.values():
            assert len(curve.points()[0]) <= 2 * MAX_POINTS + 1
        assert len(data.history.resumes) <= 100
    if example["render"]:
        result = CliRunner().invoke(cli, ["report", str(run), "-o", str(directory / "r.html")])
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            repr(result.exception))
        assert result.exit_code == (0 if data is not None else 1), result.output
        if result.exit_code:
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    after = snapshot(directory)
    assert {k: v for k, v in after.items() if k != "r.html"} == before
