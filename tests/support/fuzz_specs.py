"""Mutations of valid specs for property-based fuzzing (tests/spec/test_fuzz.py and
benchmarks/fuzz.py): delete, duplicate, retype, rename keys, swap values, inject unicode."""

from __future__ import annotations

import copy
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
