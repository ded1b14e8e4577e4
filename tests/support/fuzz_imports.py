"""`fsdpspec import` of all four kinds, fuzzed as an attacker would (issue 29): every
string value of a real config of the corpus (tests/convert/configs) kept, replaced or
extended with text holding newlines, '#', ': ', braces, quotes, ESC, NUL and planted
keys (`launch.slurm.setup`, `lint.ignore`). The check reads the spec the CLI wrote back
with fsdpspec's own loader and compares it with the fields the importer meant to write:
equal, value for value and type for type."""

from __future__ import annotations

import copy
import json
import math
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

from fuzz_specs import _parent, _paths
from hypothesis import strategies as st

from fsdpspec.spec.load import load_file

CORPUS = Path(__file__).resolve().parents[1] / "convert" / "configs"
PLANTED = ("launch: {slurm: {setup: [touch PWNED]}}", "lint: {ignore: [FS]}",
           "\nlaunch:\n  slurm:\n    setup: [touch PWNED]\n", "\nlint:\n  ignore: [FS2]\n#")
HOSTILE_PARTS = st.sampled_from([
    "\n", "\r\n", "\r", "#", " # ", ": ", "{", "}", "[", "]", "'", '"', "\x1b[2J", "\x00x",
    "\x85", "\u2028", "\u2029", "\t", "- ", "&a", "*a", "!!python/object:os.system ", "%",
    "|", ">", "\\", "$(touch PWNED)", "`id`", ";", "x", "LlamaDecoderLayer",
    "meta-llama/Llama-3.2-1B", "9" * 25, "é", *PLANTED])
HOSTILE = st.lists(HOSTILE_PARTS, min_size=1, max_size=6).map("".join)


def _yaml_seeds(*folders: Path) -> list[dict[str, Any]]:
    paths = sorted(p for folder in folders for p in folder.glob("*.y*ml"))
    return [data for data in (load_file(p).data for p in paths) if isinstance(data, dict)]


def _trainer_seeds() -> list[dict[str, Any]]:
    """Each corpus script's Trainer arguments, `--key value` as key → value, with an
    fsdp_config file beside the script inlined as a mapping."""
    from fsdpspec.convert.sources import read_command

    seeds = []
    for script in sorted(CORPUS.glob("trainer/**/*.sh")):
        args: dict[str, Any] = {}
        words = [t.text for t in read_command(script).args]
        for index, word in enumerate(words):
            if word.startswith("--"):
                following = words[index + 1] if index + 1 < len(words) else "True"
                args[word[2:]] = "True" if following.startswith("--") else following
        beside = script.parent / str(args.get("fsdp_config", ""))
        if "fsdp_config" in args and beside.is_file():
            args["fsdp_config"] = json.loads(beside.read_text())
        seeds.append(args)
    return seeds


SEEDS = {
    "accelerate": _yaml_seeds(CORPUS, CORPUS / "accelerate"),
    "axolotl": _yaml_seeds(CORPUS / "axolotl"),
    "torchtitan": [tomllib.loads(p.read_text()) for p in sorted(CORPUS.glob("torchtitan/*.toml"))],
    "trainer": _trainer_seeds(),
}


@st.composite
def _hostile_strings(draw, data: Any) -> Any:
    """``data`` with some of its string values (one to all) replaced by or joined to
    hostile text: a few at a time, so that the rest of the config still imports."""
    data = copy.deepcopy(data)
    strings = [p for p in _paths(data) if p and isinstance(_parent(data, p)[p[-1]], str)]
    if not strings:
        return data
    chosen = draw(st.lists(st.sampled_from(strings), min_size=1, max_size=len(strings),
                           unique=True))
    for path in chosen:
        holder, text = _parent(data, path), draw(HOSTILE)
        value = holder[path[-1]]
        how = draw(st.sampled_from(["replace", "before", "after"]))
        holder[path[-1]] = {"replace": text, "before": text + value, "after": value + text}[how]
    return data


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) \
            + "}"
    return json.dumps(value)  # JSON's string escapes are TOML's basic-string escapes


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_\-]+", key) else json.dumps(key)


def toml_text(data: dict[str, Any], table: str = "") -> str:
    """TOML for plain data: the scalars of a table, then its sub-tables."""
    lines = [f"[{table}]"] if table else []
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in data.items()
              if not isinstance(v, dict)]
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(toml_text(value, f"{table}.{_toml_key(key)}" if table else _toml_key(key)))
    return "\n".join(lines) + "\n"


def _script(args: dict[str, Any], master: str) -> str:
    """One torchrun line; a line break in a value would end the shell line (the reader
    refuses the open quote), so the script's values hold spaces there instead."""
    values = {k: json.dumps(v) if isinstance(v, dict) else str(v) for k, v in args.items()}
    words = ["torchrun", "--nnodes", "2", "--nproc_per_node", "2", "--master_addr", master,
             "train.py", *(w for key, value in values.items() for w in (f"--{key}", value))]
    return re.sub(r"[\r\n]", " ", " ".join(shlex.quote(word) for word in words)) + "\n"


@st.composite
def hostile_imports(draw, kind: str) -> tuple[str, str, bytes]:
    """(kind, file name, bytes) of a corpus config of ``kind`` with hostile strings."""
    data = draw(_hostile_strings(draw(st.sampled_from(SEEDS[kind]))))
    if kind == "torchtitan":
        return kind, "job.toml", toml_text(data).encode("utf-8", errors="surrogatepass")
    if kind == "trainer" and draw(st.booleans()):
        return kind, "job.sh", _script(data, draw(st.one_of(st.just("node-0"), HOSTILE))
                                       ).encode("utf-8", errors="surrogatepass")
    if kind == "trainer":
        return kind, "job.json", json.dumps(data).encode()
    return kind, "job.yaml", json.dumps(data).encode()  # JSON is YAML: every escape kept


def _nest(fields: dict[str, Any]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for dotted, value in fields.items():
        *parents, last = dotted.split(".")
        node = root
        for name in parents:
            node = node.setdefault(name, {})
        node[last] = value
    return root


def printable_lines(text: str) -> bool:
    """Lines of printable characters only (str.splitlines would split at a NEL or a
    U+2028 and so hide it)."""
    return all(char.isprintable() for line in text.split("\n") for char in line)


def _imported(example: tuple[str, str, bytes], directory: Path) -> tuple[Path, Path, str] | None:
    """The CLI's import of ``example``: it exits 0, 1 or 2 with printable one-line
    messages and no traceback, and writes nothing when it fails (then None); else the
    source, the written spec and the output."""
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli

    kind, name, raw = example
    source, out = directory / name, directory / "out.yaml"
    source.write_bytes(raw)
    result = CliRunner().invoke(cli, ["import", kind, str(source), "-o", str(out)])
    assert result.exit_code in (0, 1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        repr(result.exception))
    assert printable_lines(result.output), result.output
    if result.exit_code != 0:
        assert not out.exists()
        return None
    return source, out, result.output


def check_import(example: tuple[str, str, bytes], directory: Path) -> None:
    """The CLI's import exits 0, 1 or 2 with printable one-line messages and no
    traceback, writes nothing when it fails, and writes a spec whose every line is
    printable and that reads back as exactly the fields the importer meant to write."""
    from fsdpspec.convert.draft import Assumptions
    from fsdpspec.convert.source_kinds import importer

    imported = _imported(example, directory)
    if imported is None:
        return
    kind, (source, out, _) = example[0], imported
    text = out.read_text(encoding="utf-8")
    assert printable_lines(text), text
    meant = importer(kind).import_config()(source, name="job", assumed=Assumptions(),
                                 base_dir=Path.cwd()).fields
    loaded = load_file(out)
    assert not loaded.diagnostics, loaded.diagnostics
    expected = {"apiVersion": "fsdpspec/v1", "kind": "TrainingJob", **_nest(meant)}
    assert json.dumps(loaded.data, sort_keys=True) == json.dumps(expected, sort_keys=True)
    out.unlink()


# ---- the importers' parallelism keys (issue 42) ------------------------------------------

# A 5,000-digit integer: Python prints none past 4,300 digits, so files hold this text.
HUGE = 10**5000 - 1  # "9" × 5000
# Values a parallelism key is given: whole numbers around every boundary (0, -1, -2, a
# degree that divides nothing, 2^31, 5,000 digits), and the other types a file can hold;
# a third of them a degree a real file writes.
DEGREES = st.one_of(
    st.sampled_from([1, 2, 4, 8]), st.integers(min_value=-3, max_value=17),
    st.sampled_from([0, -1, 2**31 - 1, 2**31, 10**30, HUGE, True, False, None, 2.0, 2.5,
                     float("nan"), float("inf"), "2", "auto", "", "-1", [2], {}]))
# Each kind's parallelism keys, as its files write them (None: the file's top level).
PARALLEL_KEYS = {
    "accelerate": ("parallelism_config", [f"parallelism_config_{k}" for k in (
        "dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size", "pp_size",
        "ep_size")] + ["num_processes", "num_machines"]),
    "axolotl": (None, ["tensor_parallel_size", "context_parallel_size", "dp_shard_size",
                       "dp_replicate_size", "sequence_parallel_degree",
                       "expert_parallel_size", "pipeline_parallel_size"]),
    "torchtitan": ("parallelism", ["data_parallel_shard_degree",
                                   "data_parallel_replicate_degree", "tensor_parallel_degree",
                                   "context_parallel_degree", "pipeline_parallel_degree",
                                   "expert_parallel_degree"]),
    "trainer": (None, ["nproc_per_node", "nnodes"]),
}
_HUGE_MARK = "<5000 digits>"  # its place in a file's text, before the digits go in


def _marked(value: Any) -> Any:
    return _HUGE_MARK if value == HUGE else value


def _written(text: str) -> bytes:
    return text.replace(json.dumps(_HUGE_MARK), "9" * 5000).replace(
        _HUGE_MARK, "9" * 5000).encode()


@st.composite
def parallel_imports(draw, kind: str) -> tuple[str, str, bytes]:
    """(kind, file name, bytes) of a corpus config of ``kind`` whose parallelism keys
    (one to all) hold fuzzed values; a None key is left out."""
    data = copy.deepcopy(draw(st.sampled_from(SEEDS[kind])))
    table, keys = PARALLEL_KEYS[kind]
    chosen = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3, unique=True))
    values = {key: _marked(draw(DEGREES)) for key in chosen}
    if kind == "trainer":
        words = ["torchrun", *(w for k, v in values.items() if v is not None
                               for w in (f"--{k}", str(v))), "train.py",
                 *(w for k, v in data.items()
                   for w in (f"--{k}", json.dumps(v) if isinstance(v, dict) else str(v)))]
        return kind, "job.sh", _written(" ".join(shlex.quote(w) for w in words) + "\n")
    holder = data if table is None else data.get(table)
    if not isinstance(holder, dict):
        holder = data[table] = {}
    for key, value in values.items():
        if value is None:
            holder.pop(key, None)
        else:
            holder[key] = value
    if kind == "torchtitan":
        return kind, "job.toml", _written(toml_text(data))
    return kind, "job.yaml", _written(json.dumps(data))  # JSON is YAML


# Rules about the machine the fuzzer runs on, not the imported spec.
MACHINE_RULES = frozenset({"FS031", "FS407", "FS411"})


def check_parallel_import(example: tuple[str, str, bytes], directory: Path) -> None:
    """`check_import`'s promises, and: a spec the import writes is one `validate`
    accepts, but for the memory (FS201) of what the import assumed and said it did."""
    from fsdpspec.validate import check_file

    imported = _imported(example, directory)
    if imported is None:
        return
    _, out, output = imported
    errors = {d.code for d in check_file(out).diagnostics if d.is_error} - MACHINE_RULES
    assert errors <= {"FS201"}, (errors, output)
    if errors:
        assert "which the file does not name" in output or \
            "a GPU count the file does not say" in output, output
    out.unlink()
