"""libyaml's events under ruamel's composer (fsdpspec.spec.libyaml) give the node graph, and
the values, positions and diagnostics built from it, that ruamel's own scanner and parser
give, or libyaml declines and ruamel reads the text: on every YAML file of the repository,
on generated and damaged specs and on YAML-like noise with Unicode's line breaks, BOMs,
CRs, tabs and escapes (tests/support/fuzz_yaml.py; benchmarks/fuzz.py runs it at 10,000)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_specs import dump, mutated_data, mutated_text
from fuzz_yaml import MARKED_SPECS, YAML_NOISE, readers_agree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from fsdpspec.spec import libyaml

FAST = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
YAML_FILES = sorted(p for p in ROOT.glob("**/*.y*ml")
                    if ".venv" not in p.parts and p.suffix in (".yaml", ".yml"))


def test_libyaml_is_there() -> None:
    assert libyaml.CParser is not None, "PyYAML without libyaml: every spec is read slowly"


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_file_reads_alike(path: Path) -> None:
    text = path.read_bytes().decode("utf-8", errors="replace")
    readers_agree(text)


def test_the_examples_take_the_fast_path() -> None:
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    assert [p.name for p in examples if not readers_agree(p.read_text())] == []


@pytest.mark.parametrize("text", [
    "a: 1\r\nb: 2\r\n",  # carriage returns
    "a:\tb\n",  # a tab
    'a: "x\\/y"\n',  # an escape YAML 1.1 does not know
    "%YAML 1.1\n---\na: yes\n",  # a directive
    "a: !!str 1\n",  # an explicit tag
    "a:\nb: 1\n",  # an empty plain scalar
    "a: 1",  # no final line break
    "a: \x85b\n",  # NEL, a line break to YAML 1.1
    # issue 42: libyaml breaks a line at U+2028 / U+2029, counts a BOM as a column, and
    # reads a quoted key with ':' and no space in a flow sequence as a pair
    "a: 1\n# note\u2028lint: {ignore: [FS402]}\n",
    "a:\n  - FS150\u2028  - FS402\n",
    "a: 'x\u2029y'\nb: 1\n",
    "a: x\ufeffy\nb: 1\n",
    'a: ["FS402":"FS150"]\n',
    "a: 1\n---\nb: 2\n",  # two documents: ruamel says so
    "a: [1, 2\n",  # a syntax error: ruamel words it
])
def test_declined(text: str) -> None:
    assert not readers_agree(text)


@FAST
@given(mutated_data())
def test_generated_specs_read_alike(data) -> None:
    readers_agree(dump(data))


@FAST
@given(mutated_text())
def test_damaged_specs_read_alike(text) -> None:
    readers_agree(text)


@FAST
@given(YAML_NOISE)
def test_yaml_noise_reads_alike(text) -> None:
    """YAML-like lines with NEL, LS, PS, BOM, CR, tab or an escape here and there."""
    readers_agree(text)


@FAST
@given(MARKED_SPECS)
def test_marked_specs_read_alike(text) -> None:
    readers_agree(text)


@FAST
@given(st.text(alphabet=st.sampled_from(list("ab0.1-:?[]{},#&*!|>'\"% \n\t~=<@`é")),
               max_size=60))
def test_yaml_characters_read_alike(text) -> None:
    readers_agree(text)
