"""libyaml's C scanner and parser (PyYAML's ``CParser``) under ruamel's composer, for the
YAML that both read alike.

ruamel's pure-Python scanner and parser were 60 % of a spec's validation (2.5 ms for a
40-line file); libyaml produces the same events in a twentieth of that. ruamel still
composes them (its YAML 1.2 resolver, and load's limits on nodes and depth), so the node
graph is the one ruamel would build. libyaml is a YAML 1.1 reader, so only text in the
subset where the two agree goes this way: no tabs, carriage returns, Unicode line or
paragraph separators, BOMs, backslash escapes, directives, characters outside YAML 1.2's
printable set or quoted keys with ':' and no space, a final line break, no explicit tags,
no block scalars (1.1 and 1.2 read their headers differently) and no empty plain scalars
(ruamel places those at the next token). Anything else, and every error, is read again by
ruamel alone: every diagnostic is ruamel's, and a file reads the same wherever it stands
in a `validate` call. tests/spec/test_libyaml.py checks that the node graphs, values,
positions and diagnostics agree on every YAML file of the repository and on generated
text; benchmarks/fuzz.py's "spec: YAML fast path vs ruamel" on 10,000 more.
"""

from __future__ import annotations

import re
from functools import cache, cached_property
from typing import Any

import yaml
from ruamel.yaml import events
from ruamel.yaml.composer import Composer
from ruamel.yaml.nodes import Node
from ruamel.yaml.resolver import VersionedResolver

try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml: ruamel reads every file
    CParser = None

# Control characters but the line feed (tab and carriage return among them), the backslash,
# what YAML 1.2 does not print (C1, surrogates, U+FFFE/F), Unicode's line and paragraph
# separators (libyaml breaks a line, a comment or a plain scalar at them; ruamel keeps them
# in the line) and a BOM (libyaml counts it as a column), a directive, and a quoted scalar
# followed by ':' and no space (libyaml reads `["a":"b"]` as a pair, ruamel refuses it).
# (Written as the characters refused: the complement compiles ten times slower.)
_OUTSIDE_SUBSET = re.compile(
    r"[\x00-\x09\x0b-\x1f\\\x7f-\x9f\ud800-\udfff\u2028\u2029\ufeff\ufffe\uffff]"
    r"|^%|[\"']:[^ \n]", re.MULTILINE)


class _Declined(Exception):
    """The text is outside the subset where libyaml and ruamel agree."""


def _scalar(e: Any) -> events.ScalarEvent:
    if e.tag is not None or (e.value == "" and not e.style) or e.style in ("|", ">"):
        raise _Declined
    # libyaml writes a plain scalar's style as "", ruamel as None.
    return events.ScalarEvent(e.anchor, None, e.implicit, e.value, e.start_mark, e.end_mark,
                              style=e.style or None)


def _collection(kind: type) -> Any:
    def convert(e: Any) -> Any:
        if e.tag is not None:
            raise _Declined
        return kind(e.anchor, None, e.implicit, e.start_mark, e.end_mark,
                    flow_style=e.flow_style)
    return convert


_EVENTS = {
    yaml.StreamStartEvent: lambda e: events.StreamStartEvent(e.start_mark, e.end_mark),
    yaml.StreamEndEvent: lambda e: events.StreamEndEvent(e.start_mark, e.end_mark),
    yaml.DocumentStartEvent: lambda e: events.DocumentStartEvent(
        e.start_mark, e.end_mark, explicit=e.explicit, version=e.version, tags=e.tags),
    yaml.DocumentEndEvent: lambda e: events.DocumentEndEvent(
        e.start_mark, e.end_mark, explicit=e.explicit),
    yaml.AliasEvent: lambda e: events.AliasEvent(e.anchor, e.start_mark, e.end_mark),
    yaml.ScalarEvent: _scalar,
    yaml.SequenceStartEvent: _collection(events.SequenceStartEvent),
    yaml.SequenceEndEvent: lambda e: events.SequenceEndEvent(e.start_mark, e.end_mark),
    yaml.MappingStartEvent: _collection(events.MappingStartEvent),
    yaml.MappingEndEvent: lambda e: events.MappingEndEvent(e.start_mark, e.end_mark),
}


class _Events:
    """ruamel's parser interface (check, peek, get) over libyaml's events."""

    def __init__(self, text: str):
        self._parser = CParser(text)
        self._next: Any = None

    def peek_event(self) -> Any:
        if self._next is None:
            event = self._parser.get_event()
            self._next = _EVENTS[type(event)](event)
        return self._next

    def check_event(self, *choices: type) -> bool:
        return not choices or isinstance(self.peek_event(), choices)

    def get_event(self) -> Any:
        event, self._next = self.peek_event(), None
        return event


class _Resolver(VersionedResolver):
    # YAML 1.2, ruamel's default: the text has no %YAML directive. (ruamel looked for the
    # version, and its table, at every scalar: a seventh of composing a spec.)
    processing_version = (1, 2)

    @cached_property
    def versioned_resolver(self) -> Any:
        return VersionedResolver.versioned_resolver.fget(self)


@cache
def _direct(composer: type[Composer]) -> type[Composer]:
    """``composer`` holding its parser and resolver: ruamel's properties look both up on
    the loader at every event (a tenth of composing a spec)."""
    return type(composer.__name__, (composer,), {"parser": None, "resolver": None})


class _Loader:
    """What ruamel's composer and resolver read from their loader."""

    max_depth = None

    def __init__(self, text: str, composer: type[Composer]):
        self._parser = _Events(text)
        self._resolver = _Resolver(loader=self)
        self._composer = _direct(composer)(loader=self)
        self._composer.parser, self._composer.resolver = self._parser, self._resolver


def compose(text: str, composer: type[Composer]) -> Node | None:
    """The single document's node graph as ``composer`` builds it from libyaml's events,
    or None: outside the subset, or anything to report (ruamel reads it again)."""
    if CParser is None or not text.endswith("\n") or _OUTSIDE_SUBSET.search(text):
        return None
    try:
        return _Loader(text, composer)._composer.get_single_node()
    except Exception:  # noqa: BLE001 - libyaml's errors, the limits, _Declined: ruamel reports
        return None
