"""The loader: hostile files that cannot live as golden cases, and the SourceMap."""

from __future__ import annotations

import resource
from pathlib import Path

from conftest import CASES
from fsdpspec.spec import libyaml
from fsdpspec.spec.diagnostics import Position
from fsdpspec.spec.load import (
    MAX_BYTES,
    _BoundedComposer,
    compose_with_ruamel,
    load_file,
    parse_text,
    read_composed,
)


def codes(path: Path) -> list[str]:
    return [d.code for d in load_file(path).diagnostics]


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert codes(tmp_path / "nope.yaml") == ["FS001"]
    assert codes(tmp_path) == ["FS001"]


def test_oversize_file_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * MAX_BYTES + "\n")
    loaded = load_file(big)
    assert [d.code for d in loaded.diagnostics] == ["FS002"]
    assert "1 MiB" in loaded.diagnostics[0].message


def test_unreadable_file(tmp_path: Path) -> None:
    locked = tmp_path / "locked.yaml"
    locked.write_text("a: 1\n")
    locked.chmod(0)
    try:
        expected = [] if _is_root() else ["FS001"]
        assert codes(locked) == expected
    finally:
        locked.chmod(0o644)


def _is_root() -> bool:
    import os

    return os.geteuid() == 0


def test_billion_laughs_is_refused_with_bounded_memory() -> None:
    """Its time is printed by benchmarks/time_limits.py."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    loaded = load_file(CASES / "invalid" / "billion-laughs.yaml")
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert [d.code for d in loaded.diagnostics] == ["FS009"]
    assert grown_kib < 50_000  # the 10⁹-node expansion never happens


def test_duplicate_key_names_both_lines() -> None:
    d = load_file(CASES / "invalid" / "duplicate-key.yaml").diagnostics[0]
    assert d.position.line == 9 and "line 8" in d.message


def test_source_map_keys_values_and_missing_fields() -> None:
    loaded = parse_text("fsdp:\n  version: 2\n  layers: [a, b]\n", "f.yaml")
    sm = loaded.source_map
    assert sm.locate("/fsdp/version") == ("f.yaml", Position(2, 12, 2, 13))
    assert sm.locate("/fsdp/version", key=True) == ("f.yaml", Position(2, 3, 2, 10))
    assert sm.locate("/fsdp/layers/1")[1].col == 15
    # A missing field points at the key of its parent mapping.
    assert sm.locate("/fsdp/missing") == ("f.yaml", Position(1, 1, 1, 5))
    assert sm.locate("/nothing/here")[1].line == 1


def test_yaml_12_scalars() -> None:
    data = parse_text("a: no\nb: 010\nc: 0x10\nd: 2024-01-01\ne: ~\n", "f").data
    assert data == {"a": "no", "b": 10, "c": 16, "d": "2024-01-01", "e": None}


def test_a_reused_anchor_is_fs017_at_the_second_wherever_the_file_is_read() -> None:
    # An alias after the second `&n` names the second value: one `*n`, two readings.
    text = "a: &n 1\nb: *n\nc: &n 2\nd: *n\n"
    fast = libyaml.compose(text, _BoundedComposer)
    assert fast is not None
    for composed in ((fast, None), compose_with_ruamel(text)):  # either reader
        (diag,) = read_composed(text, "x.yaml", composed).diagnostics
        assert (diag.code, diag.position) == ("FS017", Position(3, 4, 3, 8))
        assert diag.message == "anchor &n is defined again (first on line 1)"
    assert parse_text("a: &n 1\nb: *n\nc: *n\n", "x.yaml").data == {"a": 1, "b": 1, "c": 1}
