"""The published JSON Schema, generated from the models.

``schema/fsdpspec-<version>.json`` is committed so editors can complete and check specs;
``fsdpspec schema --check`` fails when it drifts from the models.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

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
def generate(version: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one spec version."""
    from fsdpspec.spec.describe import WithFieldDocstrings  # imports pydantic
    from fsdpspec.spec.mirror import pydantic_model
    body = _tidy(pydantic_model(SUPPORTED[version]).model_json_schema(
        mode="validation", schema_generator=WithFieldDocstrings))
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
