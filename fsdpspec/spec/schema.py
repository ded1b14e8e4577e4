"""The published JSON Schema, generated from the models.

``schema/fsdpspec-<version>.json`` is committed so editors can complete and check specs;
``fsdpspec schema --check`` fails when it drifts from the models.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from fsdpspec.spec import SUPPORTED

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "schema"
_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_filename(version: str) -> str:
    return f"fsdpspec-{version.split('/')[-1]}.json"


def _tidy(node: Any) -> Any:
    """Fold docstring line breaks so descriptions read as one paragraph in editors."""
    if isinstance(node, dict):
        return {k: (re.sub(r"\s+", " ", v).strip() if k == "description" and isinstance(v, str)
                    else _tidy(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    return node


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


class _WithFieldDocstrings(GenerateJsonSchema):
    """Each field's docstring as its description, unless its Field() gives one."""

    def model_schema(self, schema):
        json_schema = super().model_schema(schema)
        properties = json_schema.get("properties", {})
        for name, doc in field_docstrings(schema["cls"]).items():
            if name in properties:
                properties[name].setdefault("description", doc)
        return json_schema


@cache
def generate(version: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one spec version."""
    body = _tidy(SUPPORTED[version].model_json_schema(
        mode="validation", schema_generator=_WithFieldDocstrings))
    return {
        "$schema": _DIALECT,
        "$id": f"https://fsdpspec.dev/schema/{schema_filename(version)}",
        **body,
        "title": f"fsdpspec {version} TrainingJob",
    }


@cache
def published(version: str) -> dict[str, Any]:
    """The schema `validate` checks against: the committed file that editors read, or,
    in an install without the repository's schema/ directory, the same schema generated
    from the models (`schema --check` keeps the two equal)."""
    path = SCHEMA_DIR / schema_filename(version)
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    return generate(version)


def render(version: str) -> str:
    return json.dumps(generate(version), indent=2, ensure_ascii=False) + "\n"
