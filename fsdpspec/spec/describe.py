"""pydantic's JSON Schema generator, with each field's docstring as its description."""

from __future__ import annotations

import ast
import inspect
import sys
from functools import cache
from itertools import pairwise
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from fsdpspec.spec.section import Section


@cache
def _module_docstrings(module: str) -> dict[str, dict[str, str]]:
    """Class name → field → the docstring under the field, for one models module (as
    pydantic's use_attribute_docstrings reads them: an annotated name, then a string)."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    found: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs = found.setdefault(node.name, {})
        for field, after in pairwise(node.body):
            if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[field.target.id] = inspect.cleandoc(after.value.value)
    return found


def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field → its docstring, inherited ones included (a subclass's own win)."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if issubclass(cls, BaseModel) and cls is not BaseModel:
            docs.update(_module_docstrings(cls.__module__).get(cls.__name__, {}))
    return docs


class WithFieldDocstrings(GenerateJsonSchema):
    """Each field's docstring as its description, unless its Field() gives one; a
    section's default as its JSON data."""

    def encode_default(self, dft: Any) -> Any:
        if isinstance(dft, Section):
            return dft.model_dump(mode="json", by_alias=True)
        return super().encode_default(dft)

    def model_schema(self, schema):
        json_schema = super().model_schema(schema)
        properties = json_schema.get("properties", {})
        for name, doc in field_docstrings(schema["cls"]).items():
            if name in properties:
                properties[name].setdefault("description", doc)
        return json_schema
