"""The spec an import writes, checked before it is written: every field is one the
schema and the models accept (a refusal names the source key and line its value came
from), and the text, read back by fsdpspec's own loader, is exactly the document the
import built: no source value can end a line, open a key or say another field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fsdpspec.convert.draft import Draft, ImportRefused, Note, note_order
from fsdpspec.spec.load import MAX_BYTES, MAX_PARSED_NODES, parse_text
from fsdpspec.spec.structure import check_structure
from fsdpspec.spec.v1 import API_VERSION
from fsdpspec.spec.yamltext import dump_yaml, one_line

CODE = "FS054"


def _field(draft: Draft, pointer: str) -> str | None:
    """The draft field a diagnostic's pointer falls in (a list item: its list), else the
    first field read from the source in the section it names (`/peft`)."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.strip("/").split("/")]
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in draft.fields:
            return ".".join(parts[:end])
    inside = ".".join(parts) + "."
    return next((dotted for dotted in draft.sources if dotted.startswith(inside)), None)


def _refusal(draft: Draft, dotted: str | None, reason: str, code: str = CODE) -> Note:
    if dotted is None:
        return Note(None, f"{code} the imported spec: {reason}")
    shown = one_line(repr(draft.value(dotted)), 60)
    source = draft.sources.get(dotted)
    if source is None:
        return Note(None, f"{code} {dotted} {shown}: {reason}")
    return Note(source.at, f"{code} {source.written} ({dotted} {shown}): {reason}")


def _refuse(notes: list[Note]) -> None:
    raise ImportRefused(sorted(notes, key=note_order))


def refuse_invalid(draft: Draft, document: dict[str, Any]) -> None:
    """ImportRefused, a line per source value, when the schema or the models refuse the
    spec (what `fsdpspec validate` would say of the written file, before anything plans
    it): a value that breaks two fields (a batch size and the global batch computed from
    it) is named once."""
    _, found = check_structure(document, API_VERSION)
    first: dict[Any, Note] = {}
    for diagnostic in (d for d in found if d.is_error):
        dotted = _field(draft, diagnostic.path)
        source = draft.sources.get(dotted) if dotted else None
        key = (source.at, source.written) if source else dotted or diagnostic.message
        first.setdefault(key, _refusal(draft, dotted, diagnostic.message))
    if first:
        _refuse(list(first.values()))


def _unreadable(draft: Draft) -> str | None:
    """The field whose value alone the spec loader refuses (a NUL, too many nodes), the
    largest tried first; else the largest (a spec over the size bound)."""
    largest = sorted(draft.fields, key=lambda d: -len(json.dumps(draft.fields[d][0])))
    for dotted in largest:
        if parse_text(dump_yaml({"field": draft.fields[dotted][0]}), "",
                      fragment=True).diagnostics:
            return dotted
    return largest[0] if largest else None


def _nodes(value: Any) -> int:
    """The YAML nodes of plain data (a mapping's keys count), without recursion."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            count += len(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def refuse_unwritable(draft: Draft, document: dict[str, Any]) -> None:
    """ImportRefused when the spec holds more nodes than the spec loader reads (20,000
    layer classes): said before the text is built, which would take seconds."""
    nodes = _nodes(document)
    if nodes > MAX_PARSED_NODES:
        largest = max(draft.fields, key=lambda d: _nodes(draft.fields[d][0]))
        _refuse([_refusal(draft, largest, f"the spec would hold {nodes} YAML nodes; a spec "
                          f"holds at most {MAX_PARSED_NODES}")])


def check_written(text: str, document: dict[str, Any], draft: Draft) -> None:
    """Read ``text`` back as `validate` would read the file: ImportRefused when the
    loader refuses it; equal, value for value and type for type, to ``document``."""
    size = len(text.encode("utf-8"))
    if size > MAX_BYTES:
        _refuse([_refusal(draft, _unreadable(draft), f"the spec would be {size} bytes; a "
                          f"spec is at most {MAX_BYTES >> 20} MiB")])
    loaded = parse_text(text, "the imported spec")
    if loaded.diagnostics:
        problem = loaded.diagnostics[0]
        _refuse([_refusal(draft, _unreadable(draft), f"{problem.code} {problem.message}")])
    # An invariant of the emitter (the import fuzz checks it too): a mismatch is a bug.
    assert json.dumps(loaded.data, sort_keys=True) == json.dumps(document, sort_keys=True), (
        "the imported spec does not read back as the document built")


# Rules about the machine the import runs on (a package, a file or a Hub cache it lacks),
# not about the spec: the job is run where those are.
MACHINE_RULES = frozenset({"FS031", "FS407", "FS411"})
# The memory verdict, which `finish` itself settles for what the import assumed.
MEMORY_RULES = frozenset({"FS201"})


def refuse_validated(text: str, draft: Draft, base_dir: Path, *, accepted: frozenset[str],
                     said: list[Note]) -> None:
    """ImportRefused, one line per refused field (the rule's code and words, and the
    source key and line its value came from), then the lines ``said`` (what the import
    assumed), when `fsdpspec validate` of ``text`` in ``base_dir`` says any error but
    those of ``accepted`` rules and the machine's."""
    from fsdpspec.validate import check_loaded

    where = base_dir / "imported.yaml"
    report = check_loaded(parse_text(text, str(where)), where)
    first: dict[Any, Note] = {}
    for diagnostic in report.diagnostics:
        if not diagnostic.is_error or diagnostic.code in MACHINE_RULES | accepted:
            continue
        dotted = _field(draft, diagnostic.path)
        first.setdefault((diagnostic.code, dotted),
                         _refusal(draft, dotted, diagnostic.message, diagnostic.code))
    if first:
        raise ImportRefused(sorted(first.values(), key=note_order) + said)
