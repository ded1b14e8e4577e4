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


def check_import(example: tuple[str, str, bytes], directory: Path) -> None:
    """The CLI's import exits 0, 1 or 2 with printable one-line messages and no
    traceback, writes nothing when it fails, and writes a spec whose every line is
    printable and that reads back as exactly the fields the importer meant to write."""
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli
    from fsdpspec.convert.draft import Assumptions
    from fsdpspec.convert.source_kinds import importer

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
        return
    text = out.read_text(encoding="utf-8")
    assert printable_lines(text), text
    meant = importer(kind).import_config()(source, name="job", assumed=Assumptions(),
                                 base_dir=Path.cwd()).fields
    loaded = load_file(out)
    assert not loaded.diagnostics, loaded.diagnostics
    expected = {"apiVersion": "fsdpspec/v1", "kind": "TrainingJob", **_nest(meant)}
    assert json.dumps(loaded.data, sort_keys=True) == json.dumps(expected, sort_keys=True)
    out.unlink()
