"""Structural checks: pydantic (the typed JobSpec); when it refuses, JSON Schema (what
editors see) says where and why, merged with pydantic's errors into one list without
duplicates; then the structural invariants the schema cannot express."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic_core import ValidationError

from fsdpspec.convert.accelerate_vocab import KEY_TO_FIELD, value_alias
from fsdpspec.semantics import DEFAULT_RDZV_PORT
from fsdpspec.spec.diagnostics import Diagnostic, error, normalize_prefix
from fsdpspec.spec.did_you_mean import closest
from fsdpspec.spec.load import join
from fsdpspec.spec.schema import published
from fsdpspec.spec.v1 import INPUT_FIELDS, Data, JobSpec, field_value

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError as SchemaError

_JSON_TYPES = {
    bool: "boolean", int: "integer", float: "number", str: "string",
    list: "list", dict: "mapping", type(None): "null",
}
_YAML11_BOOLEANS = {"yes": "true", "no": "false", "on": "true", "off": "false",
                    "y": "true", "n": "false"}
_CONSTRAINT_WORDS = {
    "minimum": "≥", "maximum": "≤", "exclusiveMinimum": ">", "exclusiveMaximum": "<",
}


def describe(value: Any) -> str:
    """A value as the user wrote it: type and a short rendering."""
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    if isinstance(value, (dict, list)):
        return f"a {kind}"
    if value is None:
        return "null"
    shown = repr(value) if isinstance(value, str) else str(value).lower()
    if len(shown) > 40:
        shown = shown[:37] + "…"
    return f"{kind} {shown}"


def _pointer(path) -> str:
    pointer = ""
    for token in path:
        pointer = join(pointer, token)
    return pointer


def _section(pointer: str) -> str:
    return pointer.lstrip("/").replace("/", ".") or "the top level"


def _field(pointer: str) -> str:
    return pointer.rsplit("/", 1)[-1]


def _unknown_field(pointer: str, key: str, allowed: list[str]) -> Diagnostic:
    where = _section(pointer)
    message = f"unknown field {key!r} in {where}"
    if key in KEY_TO_FIELD:
        hint = f"{key!r} is accelerate's name; in fsdpspec it is {KEY_TO_FIELD[key]}"
    else:
        guess = closest(key, allowed)
        hint = f"did you mean {guess!r}?" if guess else f"allowed: {', '.join(allowed)}"
    return replace(error("FS020", message, join(pointer, key), hint), on_key=True)


def _type_hint(value: Any, expected: str, field: str) -> str | None:
    alias = value_alias(field, value)
    if alias is not None:
        return f"write {alias}"
    if expected == "boolean" and isinstance(value, str) and value.lower() in _YAML11_BOOLEANS:
        word = _YAML11_BOOLEANS[value.lower()]
        return f"YAML 1.2 reads {value!r} as a string; write {word}"
    return None


def _enum_error(pointer: str, value: Any, allowed: list[Any]) -> Diagnostic:
    names = ", ".join(str(a) for a in allowed)
    alias = value_alias(_field(pointer), value)
    if alias is not None:
        hint = f"write {alias}"
    else:
        guess = closest(str(value), [str(a) for a in allowed])
        hint = f"did you mean {guess!r}?" if guess else None
    return error("FS023", f"{describe(value)} is not one of: {names}", pointer, hint)


def _branch_schema(schema: dict[str, Any], branch: dict[str, Any]) -> dict[str, Any]:
    ref = branch.get("$ref")
    return schema["$defs"][ref.rsplit("/", 1)[-1]] if ref else branch


def _branch_type(branch: dict[str, Any]) -> str:
    if "properties" in branch or branch.get("type") == "object":
        return "mapping"
    return {"array": "list"}.get(branch.get("type", ""), branch.get("type", "any"))


def _matches(value: Any, kind: str) -> bool:
    actual = _JSON_TYPES.get(type(value))
    return kind == actual or (kind == "number" and actual == "integer")


def _translate_union(err: SchemaError, schema: dict[str, Any]) -> Iterator[Diagnostic]:
    """anyOf/oneOf: report the branch whose type matches the value, else a type error."""
    branches = [_branch_schema(schema, b) for b in err.validator_value]
    pointer = _pointer(err.absolute_path)
    for index, branch in enumerate(branches):
        if _matches(err.instance, _branch_type(branch)):
            inner = [e for e in err.context if e.relative_schema_path[0] == index]
            for sub in inner:
                yield from _translate(sub, schema)
            return
    kinds = sorted({_branch_type(b) for b in branches} - {"null"})
    expected = " or ".join(kinds)
    yield error("FS022", f"expected {expected}, got {describe(err.instance)}", pointer,
                _type_hint(err.instance, expected, _field(pointer)))


def _translate(err: SchemaError, schema: dict[str, Any]) -> Iterator[Diagnostic]:
    pointer = _pointer(err.absolute_path)
    kind = err.validator
    if kind == "additionalProperties":
        allowed = list(err.schema.get("properties", {}))
        for key in err.instance:
            if key not in allowed:
                yield _unknown_field(pointer, key, allowed)
    elif kind == "required":
        for key in err.validator_value:
            if key not in err.instance:
                yield error("FS021", f"missing required field {key!r} in {_section(pointer)}",
                            join(pointer, key))
    elif kind == "type":
        expected = {"object": "mapping", "array": "list"}.get(err.validator_value,
                                                               err.validator_value)
        yield error("FS022", f"expected {expected}, got {describe(err.instance)}", pointer,
                    _type_hint(err.instance, expected, _field(pointer)))
    elif kind in ("enum", "const"):
        allowed = err.validator_value if kind == "enum" else [err.validator_value]
        yield _enum_error(pointer, err.instance, allowed)
    elif kind in ("anyOf", "oneOf"):
        yield from _translate_union(err, schema)
    elif "propertyNames" in err.relative_schema_path:
        key = join(pointer, err.instance)
        yield replace(error("FS024", f"name {err.instance!r} does not match the pattern "
                            f"{err.validator_value}", key), on_key=True)
    else:
        yield error("FS024", _constraint_message(err), pointer)


def _constraint_message(err: SchemaError) -> str:
    kind, limit = err.validator, err.validator_value
    if kind in _CONSTRAINT_WORDS:
        return f"must be {_CONSTRAINT_WORDS[kind]} {limit}, got {describe(err.instance)}"
    if kind == "pattern":
        # A field whose pattern is hard to read says what it means (x-pattern-means).
        meaning = err.schema.get("x-pattern-means")
        return f"{describe(err.instance)} is not {meaning}" if meaning else \
            f"{describe(err.instance)} does not match the pattern {limit}"
    if kind == "minLength":
        return "must not be empty" if limit == 1 else f"must be at least {limit} characters"
    if kind == "maxLength":
        return f"must be at most {limit} characters, got {len(err.instance)}"
    if kind in ("minItems", "maxItems"):
        return f"must have {'at least' if kind == 'minItems' else 'at most'} {limit} items"
    return err.message


def schema_diagnostics(data: Any, schema: dict[str, Any]) -> list[Diagnostic]:
    """Every JSON Schema violation as a diagnostic at its pointer."""
    # Imported here: a spec the models accept never needs it (a third of validate's
    # imports), as the schema is generated from the models.
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema)
    by_place: dict[tuple[str, str], Diagnostic] = {}
    for err in validator.iter_errors(data):
        for d in _translate(err, schema):
            # One value breaking both `type` and `enum` is one problem: keep the type error.
            place = (d.path, d.on_key)
            if place not in by_place or d.code < by_place[place].code:
                by_place[place] = d
    return list(by_place.values())


def check_structure(data: dict[str, Any], version: str) -> tuple[JobSpec | None,
                                                                   list[Diagnostic]]:
    """The typed spec of ``data`` (a document of a supported apiVersion) and every
    structural problem: schema, models, invariants. `validate` runs this on a file,
    `import` on the spec it is about to write."""
    spec, found = typed_spec(data, version)
    if spec is not None:
        found += list(invariants(spec))
    return spec, found


def _data_pointer(data: Any, loc: tuple, missing: bool) -> str:
    """A pydantic ``loc`` as a pointer into the data, skipping union branch labels."""
    pointer, node = "", data
    for index, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif missing and index == len(loc) - 1:
            pass  # a missing field: keep its name
        else:
            continue
        pointer = join(pointer, part)
    return pointer


def _pydantic_code(kind: str) -> str:
    if kind == "extra_forbidden":
        return "FS020"
    if kind == "missing":
        return "FS021"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return "FS022"
    if kind in ("literal_error", "enum"):
        return "FS023"
    return "FS024"


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def typed_spec(data: Any, version: str) -> tuple[JobSpec | None, list[Diagnostic]]:
    """Validate with pydantic. When it refuses, the JSON Schema's diagnostics (worded for
    the user) and then pydantic's errors at places the schema did not flag."""
    try:
        return JobSpec.model_validate(data), []
    except ValidationError as exc:
        found = schema_diagnostics(data, published(version))
        for item in exc.errors(include_url=False):
            pointer = _data_pointer(data, item["loc"], item["type"] == "missing")
            if any(_overlaps(pointer, d.path) for d in found):
                continue
            message = item["msg"][:1].lower() + item["msg"][1:]
            found.append(error(_pydantic_code(item["type"]), message, pointer))
        return None, found


# The run directory and every input (one table: INPUT_FIELDS).
_PATH_FIELDS = (("checkpoint", "dir"), *(f.path for f in INPUT_FIELDS))
# Linux's limits (NAME_MAX, PATH_MAX - 1): a longer name is ENAMETOOLONG at every stat.
MAX_COMPONENT_BYTES = 255
MAX_PATH_BYTES = 4095


def path_problem(value: str) -> str | None:
    """Why ``value`` can name no file on this machine (None when it can): checked once,
    component by component, before anything stats it (a NUL never gets here: the
    loader refuses it in any scalar, FS016)."""
    encoded = value.encode("utf-8", errors="surrogateescape")
    if len(encoded) > MAX_PATH_BYTES:
        return f"is {len(encoded)} bytes long; paths are at most {MAX_PATH_BYTES}"
    for component in encoded.split(b"/"):
        if len(component) > MAX_COMPONENT_BYTES:
            shown = component[:24].decode("utf-8", errors="replace")
            return (f"has a component of {len(component)} bytes ({shown}…); names are at "
                    f"most {MAX_COMPONENT_BYTES}")
    return None


def _unnameable_paths(spec: JobSpec) -> Iterator[Diagnostic]:
    for path in (*_PATH_FIELDS, ("checkpoint", "resume")):
        value = field_value(spec, path)
        problem = path_problem(value) if value else None
        if problem:
            yield error("FS024", f"{'.'.join(path)} {problem}", "/" + "/".join(path))



def _unexpandable_paths(spec: JobSpec) -> Iterator[Diagnostic]:
    """A path starting `~user` for a user this machine does not know would become a
    directory literally named `~user`."""
    for path in _PATH_FIELDS:
        value = field_value(spec, path)
        if value and value.startswith("~") and os.path.expanduser(value) == value:
            user = value.split("/", 1)[0]
            yield error("FS024", f"{'.'.join(path)}: {user} names no user on this machine",
                        "/" + "/".join(path), "write the path out in full")


def invariants(spec: JobSpec) -> Iterator[Diagnostic]:
    """Structural rules across fields that JSON Schema cannot say."""
    yield from _unnameable_paths(spec)
    model = spec.model
    sources = [k for k in ("preset", "hf_config", "factory") if getattr(model, k) is not None]
    if not sources:
        yield error("FS025", "no model source: set one of preset, hf_config, factory",
                    "/model/preset", "e.g. `preset: llama3-8b`")
    for extra in sources[1:]:
        yield error("FS025", f"model has both {sources[0]} and {extra}; keep one",
                    f"/model/{extra}")
    if model.geometry is not None and model.factory is None:
        yield error("FS025", "geometry describes a factory model; presets and hf_config "
                    "carry their own", "/model/geometry", "remove model.geometry")
    yield from _unexpandable_paths(spec)
    for index, entry in enumerate(spec.lint.ignore):
        if not normalize_prefix(entry):
            yield error("FS024", f"lint.ignore entry {entry!r} is not a rule code; an empty "
                        "code would ignore every rule", f"/lint/ignore/{index}",
                        "write a code or prefix such as FS503 or FS5, or remove the entry")
    if spec.data.source in ("text", "jsonl", "dataset") and spec.data.path is None:
        yield error("FS025", f"data.source {spec.data.source} needs data.path", "/data/source",
                    "set data.path to a local file or directory")
    yield from _data_invariants(spec.data)


def by_hand_invariants(spec: JobSpec) -> Iterator[Diagnostic]:
    """What `fsdpspec run` needs that a scheduler's export derives itself: by hand,
    every node must be told where the rendezvous is (sbatch and the PyTorchJob use the
    allocation's first node)."""
    if spec.resources.nodes > 1 and spec.launch.rdzv_endpoint is None:
        yield error("FS025", f"nodes: {spec.resources.nodes} run by hand needs "
                    "launch.rdzv_endpoint", "/resources/nodes",
                    f"set launch.rdzv_endpoint: <head-node>:{DEFAULT_RDZV_PORT}, pass "
                    "--rdzv-endpoint, or `fsdpspec export slurm|kubernetes`")


def _data_invariants(data: Data) -> Iterator[Diagnostic]:
    """Formats and evaluation sets are read through Hugging Face `datasets` only."""
    if data.source != "dataset":
        if data.format != "text":
            yield error("FS025", f"data.format {data.format} needs data.source dataset",
                        "/data/format", "set data.source: dataset")
        if data.evaluates():
            yield error("FS025", "data.eval needs data.source dataset", "/data/eval",
                        "set data.source: dataset")
        return
    if data.eval.fraction and (data.eval.path or data.eval.split):
        yield error("FS025", "data.eval has both a fraction and a separate set; keep one",
                    "/data/eval/fraction")
    if data.eval.fraction and data.streaming:
        yield error("FS025", "a held-out eval fraction needs the whole dataset; a stream "
                    "has no fixed size", "/data/eval/fraction",
                    "set data.eval.split or data.eval.path instead")
