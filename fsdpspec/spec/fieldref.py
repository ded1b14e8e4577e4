"""docs/spec.md: the field reference, generated from the JSON Schema of the models."""

from __future__ import annotations

import json
from typing import Any

from fsdpspec.spec import LATEST
from fsdpspec.spec.schema import generate


def _ref_name(node: dict[str, Any]) -> str | None:
    ref = node.get("$ref")
    return ref.rsplit("/", 1)[-1] if ref else None


def _type(node: dict[str, Any]) -> str:
    if _ref_name(node):
        return "mapping"
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    for union in ("anyOf", "oneOf"):
        if union in node:
            return " or ".join(_type(branch) for branch in node[union])
    kind = node.get("type", "any")
    if kind == "array":
        return f"list of {_type(node.get('items', {}))}"
    if kind == "object":
        return "mapping"
    return kind


def _default(node: dict[str, Any], required: bool) -> str:
    if required:
        return "**required**"
    if "default" not in node:
        return ""
    value = node["default"]
    if isinstance(value, dict):
        return "see below" if value else "`{}`"
    return f"`{json.dumps(value)}`"


def _rows(definition: dict[str, Any]) -> list[str]:
    required = set(definition.get("required", []))
    rows = []
    for name, node in definition.get("properties", {}).items():
        description = node.get("description", "").replace("|", "\\|")
        rows.append(f"| `{name}` | {_type(node)} | {_default(node, name in required)} "
                    f"| {description} |")
    return rows


def _sections(schema: dict[str, Any]) -> list[tuple[str, str]]:
    """(dotted path, definition name) for every mapping, in document order."""
    found: list[tuple[str, str]] = []

    def visit(prefix: str, definition: dict[str, Any]) -> None:
        for name, node in definition.get("properties", {}).items():
            branches = [node, *node.get("anyOf", [])]
            for branch in branches:
                ref = _ref_name(branch)
                if ref and all(ref != seen for _, seen in found):
                    path = f"{prefix}{name}"
                    found.append((path, ref))
                    visit(path + ".", schema["$defs"][ref])

    visit("", schema)
    return found


def render() -> str:
    schema = generate(LATEST)
    lines = [
        f"# Job spec field reference ({LATEST})",
        "",
        "Generated from the pydantic models by `fsdpspec schema --write`; do not edit.",
        "Every field is also in `schema/fsdpspec-v1.json`, which editors use for completion.",
        "",
        "## Top level",
        "",
        "| field | type | default | description |",
        "|---|---|---|---|",
        *_rows(schema),
    ]
    for path, name in _sections(schema):
        lines += ["", f"## `{path}`", "", "| field | type | default | description |",
                  "|---|---|---|---|", *_rows(schema["$defs"][name])]
    return "\n".join(lines) + "\n"
