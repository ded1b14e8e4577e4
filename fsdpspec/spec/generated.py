"""The committed files generated from the models (the JSON Schema per version, the field
reference and the compiled core schemas), and the drift check over them."""

from __future__ import annotations

import sys
from pathlib import Path

from fsdpspec.atomicio import write_bytes, write_text
from fsdpspec.spec import SUPPORTED, compiled, fieldref
from fsdpspec.spec.schema import ROOT, SCHEMA_DIR, render, schema_filename

FIELD_REFERENCE = ROOT / "docs" / "spec.md"


def _compiled_files() -> dict[Path, bytes]:
    files = {}
    for version in SUPPORTED:
        module = sys.modules[SUPPORTED[version].__module__]
        files[compiled.compiled_path(module)] = compiled.render(module)
    return files


def derived_files(directory: Path = SCHEMA_DIR) -> dict[Path, str | bytes]:
    """Every committed file generated from the models → its current contents."""
    files: dict[Path, str | bytes] = {**_compiled_files()}
    files |= {directory / schema_filename(v): render(v) for v in SUPPORTED}
    files[FIELD_REFERENCE] = fieldref.render()
    return files


def _committed(path: Path, like: str | bytes) -> str | bytes | None:
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8") if isinstance(like, str) else path.read_bytes()


def drifted(directory: Path = SCHEMA_DIR) -> list[str]:
    """Generated files whose committed contents differ from what the models generate."""
    return [str(path) for path, contents in derived_files(directory).items()
            if _committed(path, contents) != contents]


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Regenerate the schema files, the field reference and the compiled schemas."""
    written = []
    for path, contents in derived_files(directory).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(contents, str):
            write_text(path, contents)
        else:
            write_bytes(path, contents)
        written.append(path)
    return written
