"""Hypothesis strategies and checks for the file channels of benchmarks/fuzz.py (issue
20): tokenizer files, safetensors headers, run-directory files and output targets. Each
check raises (a crash) when fsdpspec answers with anything but a coded, positioned
diagnostic or a one-line error, or when a refused write changed what was there."""

from __future__ import annotations

import functools
import json
import os
import stat
import struct
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from fsdpspec.validate import check_file

CODE = __import__("re").compile(r"^FS\d{3}$")
HEAD = "apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: fuzz}\n"
DEEP = "[" * 50_000 + "]" * 50_000
# JSON values that break a reader expecting a shape: wrong types, bounds, nesting.
ODD_JSON = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.text(max_size=20), st.just("9" * 5000), st.just(DEEP), st.just(1e308),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(),
                                                         max_size=3),
)
DAMAGE = st.sampled_from(["NaN", "[", "}", "1e999", "9" * 5000, "", "\x00", "\ud800", DEEP,
                          '"\\u0000"', ",", "Infinity"])


def _damaged(text: str, draw: Any) -> bytes:
    """``text`` as raw JSON with one insertion that may make it invalid or hostile."""
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(DAMAGE) + text[at:]
    return text.encode("utf-8", errors="surrogatepass")


def _mutated(value: Any, draw: Any) -> Any:
    """``value`` (a JSON document) with one value somewhere replaced by an odd one."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        return {**value, key: _mutated(value[key], draw)}
    if isinstance(value, list) and value and draw(st.booleans()):
        index = draw(st.integers(0, len(value) - 1))
        return [*value[:index], _mutated(value[index], draw), *value[index + 1:]]
    return draw(ODD_JSON)


def _json_text(value: Any) -> str:
    if isinstance(value, str) and value == DEEP:
        return DEEP
    return json.dumps(value, allow_nan=True)


TOKENIZER_SEEDS = {
    "tokenizer.json": {"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1},
                                 "unk_token": "a"},
                       "added_tokens": [{"id": 2, "content": "</s>", "special": True}]},
    "vocab.json": {"a": 0, "b": 1, "c": 2},
    "added_tokens.json": {"</s>": 3},
    "tokenizer_config.json": {"chat_template": "{{ messages }}", "eos_token": "</s>"},
}


@st.composite
def tokenizer_files(draw) -> tuple[str, bytes | None]:
    """(file name, its bytes, or None for a FIFO in its place)."""
    name = draw(st.sampled_from(sorted(TOKENIZER_SEEDS)))
    if draw(st.integers(0, 19)) == 0:
        return name, None
    document = _mutated(TOKENIZER_SEEDS[name], draw) if draw(st.booleans()) else (
        TOKENIZER_SEEDS[name])
    return name, _damaged(_json_text(document), draw)


def _assert_diagnostics(spec: Path) -> None:
    report = check_file(spec)
    assert all(CODE.match(d.code) and d.position is not None for d in report.diagnostics), [
        (d.code, d.position) for d in report.diagnostics]
    assert all("\n" not in d.message for d in report.diagnostics)


def _place(path: Path, raw: bytes | None) -> None:
    path.unlink(missing_ok=True)
    if raw is None:
        os.mkfifo(path)
    else:
        path.write_bytes(raw)


def check_tokenizer_file(example: tuple[str, bytes | None], directory: Path) -> None:
    """A chat spec whose tokenizer directory holds the example: validated cleanly."""
    name, raw = example
    tok = directory / "tok"
    tok.mkdir()
    _place(tok / name, raw)
    spec = directory / "job.yaml"
    (directory / "d.jsonl").write_text('{"messages": []}\n')
    spec.write_text(HEAD + "model: {preset: tiny-llama}\ndata: {source: dataset, path: d.jsonl, "
                    "format: chat, tokenizer: tok, seq_len: 64, global_batch_size: 8}\n")
    _assert_diagnostics(spec)


HEADER_SEED = {"__metadata__": {"format": "pt"},
               "model.embed_tokens.weight": {"dtype": "F32", "shape": [256, 64],
                                             "data_offsets": [0, 65536]}}


@st.composite
def safetensors_headers(draw) -> bytes | None:
    """A safetensors file's bytes (its 8-byte length, right or not, then the header), or
    None for a FIFO named model.safetensors."""
    if draw(st.integers(0, 19)) == 0:
        return None
    document = _mutated(HEADER_SEED, draw) if draw(st.booleans()) else HEADER_SEED
    header = _damaged(_json_text(document), draw)
    length = draw(st.one_of(st.just(len(header)), st.integers(0, 2**64 - 1)))
    return struct.pack("<Q", length) + header


def check_safetensors_header(raw: bytes | None, directory: Path) -> None:
    """A spec whose model.weights holds the example: validated cleanly."""
    (directory / "w").mkdir()
    _place(directory / "w" / "model.safetensors", raw)
    spec = directory / "job.yaml"
    spec.write_text(HEAD + "model: {preset: tiny-llama, weights: w}\n"
                    "data: {seq_len: 64, global_batch_size: 8}\n")
    _assert_diagnostics(spec)


RECORD_SEEDS = {
    "metrics.jsonl": [{"step": 1, "loss": 5.0, "lr": 1e-3, "grad_norm": 1.0},
                      {"step": 2, "eval_loss": 4.0, "eval_perplexity": 54.6}],
    "events.jsonl": [{"event": "start", "time": 1.0, "step": 0, "max_steps": 4,
                      "world_size": 2, "resumed_from": None},
                     {"event": "end", "outcome": "finished", "step": 4, "message": None}],
}


@st.composite
def run_files(draw) -> tuple[str, bytes | None]:
    """(a run directory's file, its bytes or None for a FIFO): metrics.jsonl,
    events.jsonl, resolved-spec.json or a checkpoint's manifest.json."""
    name = draw(st.sampled_from([*RECORD_SEEDS, "resolved-spec.json", "manifest.json"]))
    if draw(st.integers(0, 19)) == 0:
        return name, None
    if name in RECORD_SEEDS:
        records = [_mutated(r, draw) if draw(st.booleans()) else r for r in RECORD_SEEDS[name]]
        text = "".join(_json_text(r) + "\n" for r in records)
        return name, _damaged(text, draw)
    seed = ({"files": {".metadata": {"bytes": 3, "sha256": "0" * 64}}}
            if name == "manifest.json" else {"spec": {"metadata": {"name": "x"}}, "run_dir": "r"})
    return name, _damaged(_json_text(_mutated(seed, draw)), draw)


@functools.cache
def _quickstart() -> Any:
    """The quickstart spec, validated once (validating it per example was 2/3 of the
    channel's time; the example is the run-directory file, not the spec)."""
    return check_file(Path(__file__).parents[2] / "examples" / "quickstart.yaml").spec


def check_run_file(example: tuple[str, bytes | None], directory: Path) -> None:
    """`fsdpspec report`'s reading of a run directory holding the example: the run's
    data or one coded RunDataError line; a manifest verifies or says why not."""
    from fsdpspec.charts.rundata import RunDataError, read_run
    from fsdpspec.runfiles.resolved import write_resolved_spec
    from fsdpspec_runners.engine.manifest import verification_problem

    name, raw = example
    run = directory / "run"
    write_resolved_spec(_quickstart(), run)
    if name == "manifest.json":
        step = run / "checkpoints" / "step-00000001"
        step.mkdir(parents=True)
        (step / ".metadata").write_bytes(b"abc")
        _place(step / name, raw)
        problem = verification_problem(step, (".metadata",))
        assert problem is None or "\n" not in problem
        return
    _place(run / name, raw)
    try:
        read_run(run)
    except RunDataError as exc:
        assert "\n" not in str(exc) and str(exc).split()[0] in ("FS040", "FS041"), str(exc)


OUTPUT_KINDS = ["missing", "file", "directory", "model directory", "symlink to a file",
                "dangling symlink", "symlink to a directory", "fifo", "long name", "dot"]


NAMES = st.text(alphabet="abc.-_ é", min_size=1, max_size=40).filter(
    lambda n: n not in (".", ".."))


@st.composite
def output_targets(draw) -> tuple[str, str, bool, str]:
    """(what the target is, what is written there: file or directory, --force, name)."""
    return (draw(st.sampled_from(OUTPUT_KINDS)), draw(st.sampled_from(["file", "directory"])),
            draw(st.booleans()), draw(NAMES))


def _make_target(kind: str, name: str, root: Path) -> Path:
    """The target in root/work; the files links point at in root/outside."""
    outside, work = root / "outside", root / "work"
    outside.mkdir()
    work.mkdir()
    (outside / "real.txt").write_text("keep\n")
    (outside / "real-dir").mkdir()
    (outside / "real-dir" / "mine.txt").write_text("keep\n")
    target, root = work / name, outside
    if kind == "file":
        target.write_text("old\n")
    elif kind in ("directory", "model directory"):
        target.mkdir()
        (target / ("config.json" if kind == "model directory" else "notes.txt")).write_text("{}")
    elif kind == "symlink to a file":
        target.symlink_to(root / "real.txt")
    elif kind == "dangling symlink":
        target.symlink_to(root / "gone")
    elif kind == "symlink to a directory":
        target.symlink_to(root / "real-dir")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "long name":
        target = work / ("a" * 300)
    elif kind == "dot":
        target = work / "."
    return target


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for path in sorted(root.rglob("*")):
        mode = os.lstat(path).st_mode
        out[str(path.relative_to(root))] = (mode, path.read_bytes() if stat.S_ISREG(mode)
                                            else b"")
    return out


def check_output_target(example: tuple[str, str, bool], directory: Path) -> None:
    """The one writer on the example target: it writes, or refuses with an OSError and
    leaves everything as it was; never a temp file left, never a write through a link."""
    from fsdpspec.atomicio import building_dir, write_bytes

    kind, what, force, name = example
    target = _make_target(kind, name, directory)
    before = snapshot(directory)
    try:
        if what == "file":
            write_bytes(target, b"new\n", replace=force)
        else:
            with building_dir(target, replace=force) as tmp:
                (tmp / "config.json").write_text("{}\n")
        written = True
    except OSError:
        written = False
    after = snapshot(directory)
    leftovers = [n for n in after if Path(n).name.startswith(".")
                 and (n.endswith(".tmp") or ".trash-" in n)]
    assert not leftovers, leftovers
    for kept in ("outside/real.txt", "outside/real-dir/mine.txt"):
        assert after[kept] == before[kept], kept  # never written through a link
    if not written:
        assert after == before, (kind, what, force)
    else:
        assert kind in ("missing", "file", "directory", "model directory", "dot"), (kind, what)
        assert force or kind == "missing", (kind, what, force)
