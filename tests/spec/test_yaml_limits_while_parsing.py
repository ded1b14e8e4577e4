"""The spec file channel is total (issue 11, item 1): the limits hold while parsing, and
every odd scalar, directive or file kind is a coded one-line error. The times these
inputs take are printed by benchmarks/yaml_limits.py; tests assert no wall-clock time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_cli
from fsdpspec.spec.load import MAX_DEPTH, MAX_PARSED_NODES, load_file

HEAD = "apiVersion: fsdpspec/v1\nkind: TrainingJob\n"


def _big_inputs() -> dict[str, tuple[str, str]]:
    """name → (text, the code that refuses it): the inputs the issue names."""
    flat = HEAD + "x:\n" + "- 1\n" * (((1 << 20) - 100) // 4)
    keys = HEAD + "".join(f"k{i}: 1\n" for i in range(80_000))
    flow = HEAD + "x: " + "[" * 1000 + "]" * 1000 + "\n"
    flow_maps = HEAD + "x: " + "{a: " * 1000 + "}" * 1000 + "\n"
    block = HEAD + "x:\n" + "".join(" " * i + "-\n" for i in range(1, 1000))
    return {"flat-list-1MiB": (flat, "FS009"), "80k-keys": (keys, "FS009"),
            "flow-1000-deep": (flow, "FS015"), "flow-maps-1000-deep": (flow_maps, "FS015"),
            "block-1000-deep": (block, "FS015")}


@pytest.mark.parametrize("name", list(_big_inputs()))
def test_a_limit_stops_the_parse_where_it_is_crossed(name: str, tmp_path: Path) -> None:
    text, code = _big_inputs()[name]
    path = tmp_path / "big.yaml"
    path.write_text(text)
    loaded = load_file(path)
    assert [d.code for d in loaded.diagnostics] == [code]
    line = loaded.diagnostics[0].position.line
    # Refused at the node that crosses the limit, not after the whole document.
    assert line <= (MAX_PARSED_NODES if code == "FS009" else MAX_DEPTH) + 4


@pytest.mark.parametrize(("value", "code", "reason"), [
    ("9" * 5000, "FS016", "out of range"),
    ("0x" + "f" * 3600, "FS016", "out of range"),  # < 4300 characters, > 4300 digits
    ("1e99999", "FS016", "overflows a float"),
    ("!!int abc", "FS016", "not a valid !!int"),
    ("!!bool x", "FS016", "not a valid !!bool"),
    ("!!float x", "FS016", "not a valid !!float"),
    ('"a\\0b"', "FS016", "NUL"),
])
def test_an_unreadable_scalar_is_a_coded_error(value, code, reason, tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(HEAD + f"x: {value}\n")
    (found,) = load_file(path).diagnostics
    assert (found.code, found.position.line, found.position.col) == (code, 3, 4)
    assert reason in found.message


def test_an_unknown_yaml_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("%YAML 1.3\n---\n" + HEAD)
    (found,) = load_file(path).diagnostics
    assert (found.code, found.position.line) == ("FS004", 1)


def _loop(path: Path) -> None:
    path.symlink_to(path.name)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _nul(path: Path) -> None:
    path.write_bytes(HEAD.encode() + b"x: a\x00b\n")


@pytest.mark.parametrize("make", [_loop, _fifo, _nul], ids=["symlink-loop", "fifo", "nul"])
@pytest.mark.parametrize("command", [["validate"], ["plan"], ["show"], ["run", "--dry-run"]])
def test_a_file_that_is_not_yaml_text_is_one_line(command, make, tmp_path: Path) -> None:
    make(tmp_path / "spec.yaml")
    result = run_cli(*command, "spec.yaml", cwd=tmp_path)
    assert result.returncode == 1
    output = (result.stdout + result.stderr).strip().splitlines()
    assert len(output) == 1 and ": FS00" in output[0], output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
