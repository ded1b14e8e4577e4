"""The published JSON Schema, generated from the pydantic models.

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

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schema"
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
    body = _tidy(SUPPORTED[version].model_json_schema(mode="validation"))
    return {
        "$schema": _DIALECT,
        "$id": f"https://fsdpspec.dev/schema/{schema_filename(version)}",
        **body,
        "title": f"fsdpspec {version} TrainingJob",
    }


def render(version: str) -> str:
    return json.dumps(generate(version), indent=2, ensure_ascii=False) + "\n"


def drifted(directory: Path = SCHEMA_DIR) -> list[str]:
    """Schema files whose committed text differs from what the models generate."""
    stale = []
    for version in SUPPORTED:
        path = directory / schema_filename(version)
        if not path.is_file() or path.read_text(encoding="utf-8") != render(version):
            stale.append(str(path))
    return stale


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for version in SUPPORTED:
        path = directory / schema_filename(version)
        path.write_text(render(version), encoding="utf-8")
        written.append(path)
    return written
