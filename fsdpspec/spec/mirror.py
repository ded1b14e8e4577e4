"""A spec section's pydantic model: the same fields, defaults, constraints and config,
built only where pydantic's work is wanted: a core schema to compile, the JSON Schema. The
core schema it generates validates into the section itself."""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

import pydantic

from fsdpspec.spec.section import AfterValidator, Field, Section, is_section


def _pydantic(value: Any) -> Any:
    """An annotation (or its metadata) with each section, Field and AfterValidator in
    pydantic's terms."""
    if is_section(value):
        return pydantic_model(value)
    if isinstance(value, Field):
        return pydantic.Field(**value.kwargs)
    if isinstance(value, AfterValidator):
        return pydantic.AfterValidator(value.function)
    origin, args = get_origin(value), get_args(value)
    if origin is Annotated:
        return Annotated[(_pydantic(args[0]), *map(_pydantic, value.__metadata__))]
    if origin in (Union, types.UnionType):
        return Union[tuple(map(_pydantic, args))]  # noqa: UP007 (a computed tuple)
    if origin in (list, dict):
        return origin[tuple(map(_pydantic, args))]
    return value


_MODELS: dict[type[Section], type[pydantic.BaseModel]] = {}


def pydantic_model(section: type[Section]) -> type[pydantic.BaseModel]:
    if section not in _MODELS:
        _MODELS[section] = _build(section)
    return _MODELS[section]


def _build(section: type[Section]) -> type[pydantic.BaseModel]:
    parent = section.__mro__[1]
    namespace: dict[str, Any] = {
        "__module__": section.__module__, "__qualname__": section.__qualname__,
        "__doc__": section.__doc__, "__annotations__": {}}
    if is_section(parent):
        base = pydantic_model(parent)
    else:
        base = pydantic.BaseModel
        namespace["model_config"] = pydantic.ConfigDict(**section.model_config)
    for name, annotation in vars(section).get("__annotations__", {}).items():
        namespace["__annotations__"][name] = _pydantic(annotation)
        if name in vars(section):
            namespace[name] = _pydantic(vars(section)[name])
    return type(base)(section.__name__, (base,), namespace)


def _sections(node: Any, mirrors: dict[type, type[Section]], names: bool = False) -> Any:
    """A core schema with each mirrored model's class replaced by its section, less
    each schema's ``metadata`` (pydantic's JSON Schema hooks, bound to the mirrors:
    pydantic-core does not read it). ``names``: ``node`` maps field names to schemas."""
    if isinstance(node, dict):
        return {k: (mirrors.get(v, v) if k == "cls" else _sections(v, mirrors, k == "fields"))
                for k, v in node.items() if names or k != "metadata"}
    if isinstance(node, list):
        return [_sections(v, mirrors) for v in node]
    return node


def core_schema(section: type[Section]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The section's core schema and core config, as pydantic generates them."""
    model = pydantic_model(section)
    mirrors = {mirror: section for section, mirror in _MODELS.items()}
    config = model.__pydantic_validator__.__reduce__()[1][1]
    return _sections(model.__pydantic_core_schema__, mirrors), config
