"""Mutations of valid specs for property-based fuzzing (tests/spec/test_fuzz.py and
benchmarks/fuzz.py): delete, duplicate, retype, rename keys, swap values, inject unicode."""

from __future__ import annotations

import copy
import functools
import io
import re
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from ruamel.yaml import YAML

from fsdpspec.spec.load import load_file
from fsdpspec.validate import check_file

ROOT = Path(__file__).resolve().parents[2]
SEEDS = sorted((ROOT / "examples").glob("*.yaml")) + sorted(
    (ROOT / "tests" / "cases" / "valid").glob("*.yaml"))
SEED_TEXTS = [p.read_text(encoding="utf-8") for p in SEEDS]
SEED_DATA = [load_file(p).data for p in SEEDS]
CODE = re.compile(r"^FS\d{3}$")

ODD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(),
                                                         max_size=2),
    st.sampled_from(["no", "on", "010", "FULL_SHARDD", "../../x", "$(touch x)", "\u202e",
                     "💥", "1e999", "~", "nan"]),
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _parent(data: Any, path: tuple) -> Any:
    for token in path[:-1]:
        data = data[token]
    return data


@st.composite
def mutated_data(draw) -> Any:
    data = copy.deepcopy(draw(st.sampled_from(SEED_DATA)))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        holder, last = _parent(data, path), path[-1]
        action = draw(st.sampled_from(["delete", "retype", "rename", "swap", "unicode"]))
        if action == "delete":
            del holder[last]
        elif action == "retype":
            holder[last] = draw(ODD_VALUES)
        elif action == "rename" and isinstance(holder, dict):
            holder[draw(st.text(min_size=1, max_size=12))] = holder.pop(last)
        elif action == "swap":
            other = draw(st.sampled_from(paths))
            other_holder = _parent(data, other)
            holder[last], other_holder[other[-1]] = other_holder[other[-1]], holder[last]
        elif action == "unicode" and isinstance(holder[last], str):
            holder[last] += draw(st.text(min_size=1, max_size=5))
    return data


def dump(data: Any) -> str:
    stream = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.dump(data, stream)
    return stream.getvalue()


@st.composite
def mutated_text(draw) -> str:
    """Line-level damage: delete, duplicate or swap lines, inject characters."""
    lines = draw(st.sampled_from(SEED_TEXTS)).splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "swap", "inject"]))
        if action == "delete" and len(lines) > 1:
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, lines[index])
        elif action == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
        else:
            at = draw(st.integers(0, len(lines[index])))
            junk = draw(st.text(min_size=1, max_size=4))
            lines[index] = lines[index][:at] + junk + lines[index][at:]
    return "".join(lines)


def check_text(text: str, path: Path) -> None:
    """Validate ``text`` as a file; raise AssertionError on any broken promise."""
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    report = check_file(path)
    line_count = text.count("\n") + 1
    for d in report.diagnostics:
        assert CODE.match(d.code), d
        assert d.position is not None, d
        assert 1 <= d.position.line <= line_count + 1, (d, line_count)
        assert d.position.col >= 1, d


# --- the other input channels (issue 11): raw bytes, --set, config.json, accelerate ----

MINIMAL = ROOT / "tests" / "cases" / "valid" / "every-section.yaml"
ACCELERATE_SEEDS = [load_file(p).data for p in sorted((ROOT / "tests" / "convert" / "configs").glob(
    "*.yaml"))]
GOOD_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
               "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512,
               "max_position_embeddings": 512, "tie_word_embeddings": False}
ODD_TEXT = st.one_of(st.text(max_size=12), st.sampled_from(
    ["", ".", "..", "a..b", "٣", "²", "!!int x", "!!bool x", "[1", "{a", "\\0", "%YAML 1.3",
     "*a", "&a [*a]", "9" * 5000, "0x" + "f" * 4000, "1e999", "- a", ": b", "~nosuchuser"]))


@functools.cache
def _minimal_keys() -> list[str]:
    """The dotted keys of MINIMAL (parsed once: a parse per example was half the time)."""
    return [".".join(map(str, p)) for p in _paths(load_file(MINIMAL).data) if p]


@st.composite
def set_flags(draw) -> str:
    """A --set flag: a dotted key (from the spec's own fields, or odd) = an odd value."""
    key = draw(st.one_of(st.sampled_from(_minimal_keys()), ODD_TEXT))
    if draw(st.booleans()):
        key += "." + draw(ODD_TEXT)
    return f"{key}={draw(ODD_TEXT)}"


def check_set_flag(flag: str) -> None:
    """--set either applies (coded diagnostics at positions) or is one-line OverrideError."""
    from fsdpspec.spec.overrides import OverrideError

    try:
        report = check_file(MINIMAL, [flag])
    except OverrideError as exc:
        assert str(exc).startswith("--set ") and "\n" not in str(exc), exc
        return
    assert all(CODE.match(d.code) and d.position is not None for d in report.diagnostics)


@st.composite
def model_configs(draw) -> bytes:
    """config.json bytes: a valid config with keys retyped or dropped, or damaged text."""
    config = dict(GOOD_CONFIG)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from([*config, "sliding_window", "head_dim", "rope_theta"]))
        config[key] = draw(st.one_of(ODD_VALUES, st.integers(-3, 2**31)))
    text = json_text(config)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["NaN", "[", "}", "1e999", "9" * 5000, ""]))
    return text.encode("utf-8", errors="surrogatepass")


def json_text(config: dict) -> str:
    import json

    return json.dumps(config, allow_nan=True)


def check_model_config(raw: bytes, directory: Path) -> None:
    """A spec whose hf_config is ``raw``: validated and planned without a crash."""
    (directory / "config.json").write_bytes(raw)
    spec = directory / "job.yaml"
    spec.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: fuzz}\n"
                    "model: {hf_config: config.json}\ndata: {seq_len: 64}\n")
    report = check_file(spec)
    assert all(CODE.match(d.code) and d.position is not None for d in report.diagnostics)


@st.composite
def accelerate_configs(draw) -> Any:
    """An accelerate config from tests/convert/configs with values retyped, keys renamed or
    sections replaced by non-mappings."""
    data = copy.deepcopy(draw(st.sampled_from(ACCELERATE_SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(data) if p]
        path = draw(st.sampled_from(paths))
        holder = _parent(data, path)
        holder[path[-1]] = draw(st.one_of(ODD_VALUES, ODD_TEXT))
    return data


def check_accelerate(text: str, directory: Path) -> None:
    """`fsdpspec import accelerate` answers with exit 0, 1 or 2 and one line per
    problem; a failed import writes nothing."""
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli

    config = directory / "accelerate.yaml"
    config.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    out = directory / "out.yaml"
    result = CliRunner().invoke(cli, ["import", "accelerate", str(config), "-o", str(out)])
    assert result.exit_code in (0, 1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        repr(result.exception))
    assert result.exit_code == 0 or not out.exists()
    out.unlink(missing_ok=True)
