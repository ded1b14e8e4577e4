"""libyaml's events under ruamel's composer (fsdpspec.spec.libyaml) give the node graph that
ruamel's own scanner and parser give, or libyaml declines and ruamel reads the text: on
every YAML file of the repository, on generated and damaged specs and on YAML-like noise."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_specs import dump, mutated_data, mutated_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode

from conftest import ROOT
from fsdpspec.spec import libyaml
from fsdpspec.spec.load import _BoundedComposer, compose_with_ruamel

FAST = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
YAML_FILES = sorted(p for p in ROOT.glob("**/*.y*ml")
                    if ".venv" not in p.parts and p.suffix in (".yaml", ".yml"))
# Lines made of what YAML's syntax is made of, to find where the two readers part.
_ATOM = st.text(alphabet=st.sampled_from(list("ab0.1-:?[]{},#&*|>'\" ~=<@`é+eEx_")),
                max_size=12)
_VALUE = st.one_of(
    _ATOM, _ATOM.map(lambda a: f"'{a}'"), _ATOM.map(lambda a: f'"{a}"'),
    st.lists(_ATOM, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    st.lists(st.tuples(_ATOM, _ATOM), max_size=3).map(
        lambda kvs: "{" + ", ".join(f"{k}: {v}" for k, v in kvs) + "}"),
    _ATOM.map(lambda a: f"&x {a}"), st.just("*x"))
_LINES = {"kv": "{pad}{k}: {v}", "item": "{pad}- {v}", "key": "{pad}{k}:",
          "item-kv": "{pad}- {k}: {v}", "comment": "{pad}# {v}", "blank": "", "doc": "---"}
YAML_NOISE = st.lists(
    st.builds(lambda n, kind, k, v: _LINES[kind].format(pad=" " * n, k=k, v=v),
              st.integers(0, 6), st.sampled_from(list(_LINES)), _ATOM, _VALUE),
    min_size=1, max_size=8).map(lambda lines: "\n".join(lines) + "\n")


def _graph(node: Node, seen: dict[int, int]) -> tuple:
    """Everything the loader reads from a node, an alias as the node it names."""
    if id(node) in seen:
        return ("alias", seen[id(node)])
    seen[id(node)] = len(seen)
    start, end = node.start_mark, node.end_mark
    head = (type(node).__name__, str(node.tag), node.anchor, start.line, start.column,
            end.line, end.column)
    if isinstance(node, ScalarNode):
        return (*head, node.value, node.style)
    if isinstance(node, MappingNode):
        return (*head, node.flow_style, tuple((_graph(k, seen), _graph(v, seen))
                                               for k, v in node.value))
    return (*head, node.flow_style, tuple(_graph(item, seen) for item in node.value))


def _assert_agree(text: str) -> bool:
    """True when libyaml read the text (and built ruamel's graph), False when it declined."""
    fast = libyaml.compose(text, _BoundedComposer)
    if fast is None:
        return False
    pure, problem = compose_with_ruamel(text)
    assert problem is None, f"libyaml accepted what ruamel refuses: {problem}"
    assert _graph(fast, {}) == _graph(pure, {})
    return True


def test_libyaml_is_there() -> None:
    assert libyaml.CParser is not None, "PyYAML without libyaml: every spec is read slowly"


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_file_reads_alike(path: Path) -> None:
    text = path.read_bytes().decode("utf-8", errors="replace")
    _assert_agree(text)


def test_the_examples_take_the_fast_path() -> None:
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    assert [p.name for p in examples if not _assert_agree(p.read_text())] == []


@pytest.mark.parametrize("text", [
    "a: 1\r\nb: 2\r\n",  # carriage returns
    "a:\tb\n",  # a tab
    'a: "x\\/y"\n',  # an escape YAML 1.1 does not know
    "%YAML 1.1\n---\na: yes\n",  # a directive
    "a: !!str 1\n",  # an explicit tag
    "a:\nb: 1\n",  # an empty plain scalar
    "a: 1",  # no final line break
    "a: \x85b\n",  # NEL, a line break to YAML 1.1
    "a: 1\n---\nb: 2\n",  # two documents: ruamel says so
    "a: [1, 2\n",  # a syntax error: ruamel words it
])
def test_declined(text: str) -> None:
    assert not _assert_agree(text)


@FAST
@given(mutated_data())
def test_generated_specs_read_alike(data) -> None:
    _assert_agree(dump(data))


@FAST
@given(mutated_text())
def test_damaged_specs_read_alike(text) -> None:
    _assert_agree(text)


@FAST
@given(YAML_NOISE)
def test_yaml_noise_reads_alike(text) -> None:
    _assert_agree(text)


@FAST
@given(st.text(alphabet=st.sampled_from(list("ab0.1-:?[]{},#&*!|>'\"% \n\t~=<@`é")),
               max_size=60))
def test_yaml_characters_read_alike(text) -> None:
    _assert_agree(text)
