"""Read a YAML job spec into plain data plus a SourceMap, refusing hostile input.

The YAML is composed (ruamel.yaml, YAML 1.2; from the second file a process reads on,
from libyaml's events where the two read alike: fsdpspec.spec.libyaml) into a node
graph, never constructed as Python objects, and plain data is built from the nodes
here. That keeps every position, lets duplicate keys name both lines, and bounds alias
expansion: a billion-laughs file is refused after ``MAX_NODES`` nodes instead of being
expanded.

The limits on nodes and depth also hold *while* the text is parsed: the composer counts
as it goes and stops at the first node past a limit, so a 1 MiB flat list or 1,000-deep
flow nesting is refused after reading only as much as the limit allows.
"""

from __future__ import annotations

import codecs
import itertools
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.scanner import Scanner

from fsdpspec.spec.diagnostics import Diagnostic, Position, error

MAX_BYTES = 1 << 20
MAX_NODES = 20_000
MAX_DEPTH = 64
# Nodes as written (aliases not expanded): parsing is the slow part, so it is bounded
# well below MAX_NODES; a job spec holds a few hundred.
MAX_PARSED_NODES = 5_000
# Python refuses to print an int of more decimal digits than this (CVE-2020-10735).
MAX_INT_DIGITS = 4_300
_YAML_DIRECTIVE = re.compile(r"^%YAML[ \t]+(\S*)", re.MULTILINE)
# Importing libyaml's parser (PyYAML) costs about 14 ms, what it saves on eight 40-line
# specs (1.8 ms each): a process reads its first spec with ruamel alone (`validate
# job.yaml` in an editor), the ones after it with libyaml (`validate` of a repository);
# a fragment (the `--set` values `plan` tries) never pays for it.
_SPECS_READ = itertools.count()

_MAX_INT_BITS = int(MAX_INT_DIGITS * math.log2(10))
_STD = "tag:yaml.org,2002:"
_PLAIN_TAGS = {_STD + t for t in ("str", "int", "float", "bool", "null", "seq", "map")}
_TIMESTAMP = _STD + "timestamp"
_MERGE = _STD + "merge"
_BOMS = {
    codecs.BOM_UTF32_LE: "UTF-32",
    codecs.BOM_UTF32_BE: "UTF-32",
    codecs.BOM_UTF16_LE: "UTF-16",
    codecs.BOM_UTF16_BE: "UTF-16",
}


def escape(token: str) -> str:
    """One JSON-pointer reference token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def join(pointer: str, token: str | int) -> str:
    return f"{pointer}/{escape(str(token))}"


def parent(pointer: str) -> str:
    return pointer.rsplit("/", 1)[0]


@dataclass
class SourceMap:
    """JSON pointer → span of the value, and of the key that names it."""

    file: str
    values: dict[str, Position] = field(default_factory=dict)
    keys: dict[str, Position] = field(default_factory=dict)
    # Pointers set by --set: pointer → (label of the flag, span inside it).
    overrides: dict[str, tuple[str, Position]] = field(default_factory=dict)

    def locate(self, pointer: str, *, key: bool = False) -> tuple[str, Position]:
        """(file, span) for a pointer; a pointer that is not in the document (a missing
        field) resolves to the key of its nearest existing ancestor."""
        if pointer in self.overrides:
            return self.overrides[pointer]
        if key and pointer in self.keys:
            return self.file, self.keys[pointer]
        if pointer in self.values:
            return self.file, self.values[pointer]
        probe = pointer
        while probe:
            probe = parent(probe)
            if probe in self.overrides:
                return self.overrides[probe]
            if probe in self.keys:
                return self.file, self.keys[probe]
        return self.file, self.values.get("", Position(1, 1, 1, 1))


@dataclass
class Loaded:
    """The outcome of reading one file: data (None when unreadable) and problems."""

    file: str
    text: str
    data: Any
    source_map: SourceMap
    diagnostics: list[Diagnostic]


class _Refused(Exception):
    """Stops building on the first structural problem; carries its diagnostic."""

    def __init__(self, diagnostic: Diagnostic):
        self.diagnostic = diagnostic


def _span(node: Node) -> Position:
    start, end = node.start_mark, node.end_mark
    return Position(start.line + 1, start.column + 1, end.line + 1, end.column + 1)


def _refuse(code: str, message: str, node: Node, hint: str | None = None) -> _Refused:
    return _Refused(error(code, message, hint=hint).at("", _span(node)))


class _Builder:
    """Plain data from a node graph, recording spans and enforcing the limits."""

    def __init__(self, source_map: SourceMap):
        self.source_map = source_map
        self.nodes = 0
        self.anchors: dict[str, Node] = {}
        self.constructor = YAML(typ="safe", pure=True).constructor

    def build(self, node: Node, pointer: str, depth: int, active: frozenset[int]) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _refuse("FS009", f"document expands to more than {MAX_NODES} nodes "
                          "(an alias expansion bomb?)", node, "write the values out; "
                          "a job spec needs a few hundred nodes")
        if depth > MAX_DEPTH:
            raise _Refused(_too_deep().at("", _span(node)))
        if id(node) in active:
            raise _refuse("FS009", "recursive alias: a node contains itself", node)
        if node.anchor is not None and self.anchors.setdefault(node.anchor, node) is not node:
            first = self.anchors[node.anchor].start_mark.line + 1
            raise _refuse("FS017", f"anchor &{node.anchor} is defined again (first on line "
                          f"{first})", node, "give each anchor its own name: an alias "
                          "names whichever came last")
        self.source_map.values.setdefault(pointer, _span(node))
        tag = str(node.tag)
        if tag not in _PLAIN_TAGS and tag != _TIMESTAMP:
            shown = tag.replace(_STD, "!!")
            raise _refuse("FS010", f"tag {shown} is not allowed", node,
                          "job specs hold plain YAML values; remove the tag")
        if isinstance(node, ScalarNode):
            return self.scalar(node, tag)
        inner = active | {id(node)}
        if isinstance(node, SequenceNode):
            return [self.build(item, join(pointer, i), depth + 1, inner)
                    for i, item in enumerate(node.value)]
        assert isinstance(node, MappingNode)
        return self.mapping(node, pointer, depth, inner)

    def scalar(self, node: ScalarNode, tag: str) -> Any:
        if tag == _TIMESTAMP:
            return node.value  # dates are kept as written: no field holds a datetime
        shown = tag.replace(_STD, "!!")
        if tag == _STD + "int" and len(node.value) > MAX_INT_DIGITS:
            raise _refuse("FS016", f"integer of {len(node.value)} digits is out of range",
                          node, "no field holds a number this large")
        try:
            value = self.constructor.construct_object(node, deep=True)
        except (ValueError, KeyError, TypeError, OverflowError):
            raise _refuse("FS016", f"{node.value[:40]!r} is not a valid {shown}", node,
                          "remove the tag or write a value of that type") from None
        if isinstance(value, str) and "\x00" in value:
            raise _refuse("FS016", "value holds a NUL character", node,
                          "no field holds a NUL; remove the \\0 escape")
        if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
            raise _refuse("FS016", "integer is out of range", node,
                          "no field holds a number this large")
        if isinstance(value, float) and math.isinf(value) and "inf" not in node.value.lower():
            raise _refuse("FS016", f"{node.value[:40]!r} overflows a float", node,
                          "no field holds a number this large")
        return value

    def mapping(self, node: MappingNode, pointer: str, depth: int, active: frozenset[int]):
        result: dict[str, Any] = {}
        first_seen: dict[str, Node] = {}
        for key_node, value_node in node.value:
            key_tag = str(key_node.tag)
            if key_tag == _MERGE:
                raise _refuse("FS010", "merge keys (<<) are not allowed", key_node,
                              "repeat the keys; merges hide where a value comes from")
            if not isinstance(key_node, ScalarNode) or key_tag != _STD + "str":
                shown = getattr(key_node, "value", None)
                what = f"key {shown!r}" if shown else "an empty key"
                raise _refuse("FS011", f"{what} is not a string", key_node, "quote the key")
            key = key_node.value
            if key in first_seen:
                first = first_seen[key].start_mark.line + 1
                raise _refuse("FS008", f"duplicate key {key!r} (first defined on line "
                              f"{first})", key_node, "keep one of the two")
            first_seen[key] = key_node
            child = join(pointer, key)
            self.source_map.keys[child] = _span(key_node)
            result[key] = self.build(value_node, child, depth + 1, active)
        return result


def _decode(raw: bytes) -> tuple[str | None, Diagnostic | None]:
    for bom, name in _BOMS.items():
        if raw.startswith(bom):
            return None, error("FS003", f"file is encoded as {name}; specs are UTF-8",
                               hint="re-save the file as UTF-8")
    if b"\x00" in raw:
        return None, error("FS003", "file is binary (contains NUL bytes), not YAML")
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        valid = raw[: exc.start].decode("utf-8-sig")  # everything before the bad byte
        diag = error("FS003", f"invalid UTF-8 byte 0x{raw[exc.start]:02x}",
                     hint="re-save the file as UTF-8")
        return None, diag.at("", _offset_position(valid, len(valid)))


def _offset_position(text: str, offset: int) -> Position:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Position(line, col, line, col + 1)


def _yaml_error(exc: YAMLError, text: str) -> Diagnostic:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    code, hint = "FS004", None
    if "'\\t'" in problem:
        code, hint = "FS012", "YAML indents with spaces; replace the tab"
    if isinstance(exc, ReaderError):  # a control character: the reader knows only an offset
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        problem = f"control character U+{char:04X} is not allowed in YAML"
        return error(code, problem).at("", _offset_position(text, exc.position))
    diag = error(code, f"YAML syntax error: {problem}", hint=hint)
    if isinstance(exc, MarkedYAMLError) and mark is not None:
        return _at_mark(diag, mark)
    return diag


class _BoundedComposer(Composer):
    """ruamel's composer, stopped at the first node past MAX_PARSED_NODES or MAX_DEPTH,
    before the rest of the text is scanned."""

    nodes = 0

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self.warn_double_anchors = False  # the builder refuses a reused anchor: FS017

    def compose_node(self, parent: Any, index: Any) -> Any:
        mark = self.parser.peek_event().start_mark
        self.nodes += 1
        if self.nodes > MAX_PARSED_NODES:
            raise _Refused(_at_mark(error(
                "FS009", f"document holds more than {MAX_PARSED_NODES} nodes",
                hint="a job spec needs a few hundred nodes"), mark))
        if self.depth > MAX_DEPTH:
            raise _Refused(_at_mark(_too_deep(), mark))
        return super().compose_node(parent, index)


class _BoundedScanner(Scanner):
    """Refuses flow nesting past MAX_DEPTH as the bracket is read: the scanner looks up to
    1,024 characters ahead inside flow brackets, at a cost that grows with their depth."""

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _Refused(_at_mark(_too_deep(), self.reader.get_mark()))
        super().fetch_flow_collection_start(TokenClass, to_push)


def _too_deep() -> Diagnostic:
    return error("FS015", f"nesting deeper than {MAX_DEPTH} levels")


def _at_mark(diag: Diagnostic, mark: Any) -> Diagnostic:
    return diag.at("", Position(mark.line + 1, mark.column + 1, mark.line + 1,
                                mark.column + 2))


def _directive_problem(text: str) -> Diagnostic | None:
    """A %YAML directive naming a version ruamel cannot read (it would assert)."""
    for match in _YAML_DIRECTIVE.finditer(text):
        if match.group(1) not in ("1.1", "1.2"):
            diag = error("FS004", f"unsupported YAML version {match.group(1)[:20]!r}",
                         hint="remove the %YAML line; specs are YAML 1.2")
            return diag.at("", _offset_position(text, match.start()))
    return None


def _compose(text: str, fragment: bool) -> tuple[Node | None, Diagnostic | None]:
    """The first document's node graph; several documents are refused."""
    problem = _directive_problem(text)
    if problem is not None:
        return None, problem
    if not fragment and next(_SPECS_READ):
        from fsdpspec.spec import libyaml

        root = libyaml.compose(text, _BoundedComposer)
        if root is not None:
            return root, None
    return compose_with_ruamel(text)


def compose_with_ruamel(text: str) -> tuple[Node | None, Diagnostic | None]:
    """`_compose` by ruamel's scanner and parser alone: the reader of every error."""
    # The safe scanner and parser, not the round-trip ones: only the nodes and their
    # marks are read here, and gathering comments was a quarter of a spec's validation.
    yaml = YAML(typ="safe", pure=True)
    yaml.Composer = _BoundedComposer
    yaml.Scanner = _BoundedScanner
    documents = yaml.compose_all(text)
    try:
        root = next(documents, None)
        extra = next(documents, None)
    except YAMLError as exc:
        return None, _yaml_error(exc, text)
    except _Refused as refused:
        return None, refused.diagnostic
    if extra is not None:
        line = extra.start_mark.line + 1
        return None, error("FS006", "file holds several YAML documents; a spec is one",
                           hint="split the documents into separate files").at(
            "", Position(line, 1, line, 4))
    return root, None


def parse_text(text: str, file: str, *, fragment: bool = False) -> Loaded:
    """Plain data and a SourceMap from YAML text (any root type). A ``fragment`` (a
    `--set` value, one field) is not a spec: ruamel alone reads it."""
    return read_composed(text, file, _compose(text, fragment))


def read_composed(text: str, file: str,
                  composed: tuple[Node | None, Diagnostic | None]) -> Loaded:
    """`parse_text` from a composed (node graph, problem): the fast path and ruamel's
    graphs go through the same builder, which tests/support/fuzz_yaml.py compares."""
    root, problem = composed
    source_map = SourceMap(file)
    if problem is None and (root is None or str(root.tag) == _STD + "null"):
        problem = error("FS005", "file is empty", hint="start from `fsdpspec init`")
    if problem is not None:
        return Loaded(file, text, None, source_map, [_in_file(problem, file)])
    try:
        data = _Builder(source_map).build(root, "", 0, frozenset())
    except _Refused as refused:
        return Loaded(file, text, None, source_map, [_in_file(refused.diagnostic, file)])
    return Loaded(file, text, data, source_map, [])


def _in_file(diag: Diagnostic, file: str) -> Diagnostic:
    return diag.at(file, diag.position or Position(1, 1, 1, 1))


def load_file(path: Path, display: str | None = None) -> Loaded:
    """Read and parse a spec file; every failure becomes a diagnostic."""
    file = display or str(path)
    raw, problem = _read(path)
    if raw is not None:
        text, problem = _decode(raw)
    if problem is not None:
        return Loaded(file, "", None, SourceMap(file), [_in_file(problem, file)])
    loaded = parse_text(text, file)
    if loaded.data is not None and not isinstance(loaded.data, dict):
        kind = type(loaded.data).__name__
        diag = error("FS007", f"the document is a {kind}, not a mapping of fields",
                     hint="a spec starts with `apiVersion: fsdpspec/v1`")
        loaded.diagnostics.append(diag.at(file, loaded.source_map.values[""]))
        loaded.data = None
    return loaded


def _read(path: Path) -> tuple[bytes | None, Diagnostic | None]:
    """The file's bytes, or why they cannot be had. Only regular files are read (a FIFO
    or a device would block or never end), and never more than MAX_BYTES + 1 bytes."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None, error("FS001", f"no such file: {path}")
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        return None, error("FS001", f"cannot read {path}: {getattr(exc, 'strerror', exc)}")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory, not a spec file" if stat.S_ISDIR(mode) else "not a regular file"
        return None, error("FS001", f"{path} is {kind}")
    with os.fdopen(fd, "rb") as fh:
        try:
            raw = fh.read(MAX_BYTES + 1)
        except OSError as exc:
            return None, error("FS001", f"cannot read {path}: {exc.strerror}")
    if len(raw) > MAX_BYTES:
        return None, error("FS002", "file is larger than 1 MiB; specs are limited to 1 MiB")
    return raw, None
