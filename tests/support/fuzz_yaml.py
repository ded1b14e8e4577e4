"""The YAML fast path against ruamel (issue 42): libyaml's events under ruamel's composer
(fsdpspec.spec.libyaml) must give the node graph, the values, the source positions and the
diagnostics that ruamel's own scanner and parser give, or decline the text. Shared by
tests/spec/test_libyaml.py and benchmarks/fuzz.py's "spec: YAML fast path vs ruamel"."""

from __future__ import annotations

from pathlib import Path

from fuzz_specs import SEED_TEXTS
from hypothesis import strategies as st
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode

from fsdpspec.spec import libyaml
from fsdpspec.spec.load import _BoundedComposer, compose_with_ruamel, read_composed

# What the two readers may part on: Unicode's line breaks (NEL, LS, PS), a BOM, CR, tab,
# and every escape of a double-quoted scalar (YAML 1.2's, and 1.1's that 1.2 dropped).
BREAKS = ["\x85", "\u2028", "\u2029", "\ufeff", "\r", "\r\n", "\t"]
ESCAPES = [f"\\{c}" for c in "0abtnvfre \"/\\N_LP\t"] + [
    "\\x41", "\\u2028", "\\U0001F4A5", "\\x", "\\u12", "\\q", "\\\n"]
# Lines made of what YAML's syntax is made of, to find where the two readers part.
_ATOM = st.text(alphabet=st.sampled_from(
    list("ab0.1-:?[]{},#&*!|>'\"% ~=<@`é+eEx_\u00a0\u200b\U0001F4A5")), max_size=10)
_VALUE = st.one_of(
    _ATOM, _ATOM.map(lambda a: f"'{a}'"), _ATOM.map(lambda a: f'"{a}"'),
    st.lists(_ATOM, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    st.lists(st.tuples(_ATOM, _ATOM), max_size=3).map(
        lambda kvs: "{" + ", ".join(f"{k}: {v}" for k, v in kvs) + "}"),
    st.lists(st.tuples(_ATOM, _ATOM), max_size=3).map(
        lambda kvs: "[" + ", ".join(f'"{k}":"{v}"' for k, v in kvs) + "]"),
    _ATOM.map(lambda a: f"&x {a}"), st.just("*x"))
_LINES = {"kv": "{pad}{k}: {v}", "item": "{pad}- {v}", "key": "{pad}{k}:",
          "item-kv": "{pad}- {k}: {v}", "comment": "{pad}# {v}",
          "trailing": "{pad}{k}: {v} # {v}", "blank": "", "doc": "---"}
_NOISE = st.lists(
    st.builds(lambda n, kind, k, v: _LINES[kind].format(pad=" " * n, k=k, v=v),
              st.integers(0, 6), st.sampled_from(list(_LINES)), _ATOM, _VALUE),
    min_size=1, max_size=8).map(lambda lines: "\n".join(lines) + "\n")


def _inject(text: str, marks: list[tuple[int, str]]) -> str:
    for at, what in marks:
        at %= len(text) + 1
        text = text[:at] + what + text[at:]
    return text


_MARKS = st.lists(st.tuples(st.integers(0, 1 << 16), st.sampled_from(BREAKS + ESCAPES)),
                  max_size=2)
# YAML-like noise, and the repository's specs, with none, one or two of those marks.
YAML_NOISE = st.builds(_inject, _NOISE, _MARKS)
MARKED_SPECS = st.builds(_inject, st.sampled_from(SEED_TEXTS), _MARKS)


def graph(node: Node, seen: dict[int, int]) -> tuple:
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
        return (*head, node.flow_style, tuple((graph(k, seen), graph(v, seen))
                                               for k, v in node.value))
    return (*head, node.flow_style, tuple(graph(item, seen) for item in node.value))


def readers_agree(text: str) -> bool:
    """True when the fast path read ``text`` exactly as ruamel does (the node graph, and
    the values, positions and diagnostics built from it), False when it declined;
    AssertionError where the two part."""
    fast = libyaml.compose(text, _BoundedComposer)
    if fast is None:
        return False
    pure = compose_with_ruamel(text)
    assert pure[1] is None, f"the fast path read what ruamel refuses: {pure[1]}"
    assert graph(fast, {}) == graph(pure[0], {})
    one, other = read_composed(text, "f.yaml", (fast, None)), read_composed(text, "f.yaml", pure)
    assert repr(one.data) == repr(other.data)
    assert (one.source_map.values, one.source_map.keys) == (
        other.source_map.values, other.source_map.keys)
    assert one.diagnostics == other.diagnostics
    return True


def check_readers_agree(text: str, _tmp: Path) -> None:
    readers_agree(text)
