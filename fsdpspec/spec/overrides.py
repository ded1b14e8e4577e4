"""`--set a.b.c=VALUE` overrides, applied to the plain data before validation.

VALUE is read as YAML (so `--set fsdp.cpu_offload=true` is a boolean and
`--set fsdp.transformer_layer_cls=[LlamaDecoderLayer]` a list). A diagnostic about an
overridden value points at the flag that set it.
"""

from __future__ import annotations

from typing import Any

from fsdpspec.spec.diagnostics import FLAG_SOURCE, Position
from fsdpspec.spec.load import SourceMap, join, parse_text


class OverrideError(ValueError):
    """A --set that cannot be applied: a usage error (exit 2)."""


def _shown(name: str) -> str:
    """A key as the message shows it: as typed, or quoted when it holds a newline or
    another unprintable character (the message stays one line)."""
    return name if name.isprintable() else repr(name)


def _is_index(token: str) -> bool:
    """A list index is ASCII digits: str.isdigit also takes '٣' and '²'."""
    return token.isascii() and token.isdigit()


def _parse(text: str) -> tuple[list[str], Any, int]:
    key, sep, raw = text.partition("=")
    tokens = key.strip().split(".")
    if not sep:
        raise OverrideError(f"--set {text!r}: expected KEY=VALUE, e.g. "
                            "fsdp.sharding_strategy=SHARD_GRAD_OP")
    if not all(t.strip() for t in tokens):
        what = "an empty key" if not key.strip() else f"key {key.strip()!r} has an empty part"
        raise OverrideError(f"--set {text!r}: {what}; write dotted names such as "
                            "fsdp.sharding_strategy")
    parsed = parse_text(raw, "--set", fragment=True) if raw.strip() else None
    # FS005 "empty" is the loader's word for a document that is null: `--set peft=null`
    # (or `~`) sets the field to null, as the same YAML does in the file.
    problems = [d for d in parsed.diagnostics if d.code != "FS005"] if parsed else []
    if problems:
        raise OverrideError(f"--set {text!r}: {problems[0].message}")
    value = parsed.data if parsed is not None else None
    return [t.strip() for t in tokens], value, len(key) + 2


def _descend(node: Any, token: str, following: str | None, text: str) -> tuple[Any, bool]:
    """The child at ``token`` and whether it had to be created (as a mapping)."""
    if isinstance(node, list):
        if not _is_index(token) or int(token) >= len(node):
            raise OverrideError(f"--set {text!r}: {token!r} is not an index of that list")
        return node[int(token)], False
    if token in node:
        return node[token], False
    if following is not None and _is_index(following):
        prefix = text.split("=", 1)[0].rsplit(".", 1)[0]
        raise OverrideError(f"--set {text!r}: {_shown(token)} is not in the file; set the "
                            f"whole list, e.g. --set {_shown(prefix)}=[…]")
    node[token] = {}
    return node[token], True


def apply_overrides(data: dict[str, Any], overrides: list[str], source_map: SourceMap) -> None:
    """Apply each override in order, recording where it came from."""
    for text in overrides:
        tokens, value, value_col = _parse(text)
        label = f"{FLAG_SOURCE}{text}"
        start = len(FLAG_SOURCE) + value_col
        where = (label, Position(1, start, 1, max(start + 1, len(label) + 1)))
        node, pointer = data, ""
        for index, token in enumerate(tokens[:-1]):
            node, created = _descend(node, token, tokens[index + 1], text)
            pointer = join(pointer, token)
            if created:  # a problem inside a section the flag made belongs to the flag
                source_map.overrides[pointer] = where
            if not isinstance(node, (dict, list)):
                dotted = pointer.lstrip("/").replace("/", ".")
                raise OverrideError(f"--set {text!r}: {_shown(dotted)} holds a value, not a "
                                    "section")
        last = tokens[-1]
        if isinstance(node, list):
            _descend(node, last, None, text)
            node[int(last)] = value
        else:
            node[last] = value
        source_map.overrides[join(pointer, last)] = where
