"""The committed files generated from the models (the JSON Schema per version and the
field reference), and the drift check over them."""

from __future__ import annotations

from pathlib import Path

from fsdpspec.atomicio import write_text
from fsdpspec.spec import SUPPORTED, fieldref
from fsdpspec.spec.schema import ROOT, SCHEMA_DIR, render, schema_filename

FIELD_REFERENCE = ROOT / "docs" / "spec.md"


def derived_files(directory: Path = SCHEMA_DIR) -> dict[Path, str]:
    """Every committed file generated from the models → its current text."""
    files = {directory / schema_filename(v): render(v) for v in SUPPORTED}
    files[FIELD_REFERENCE] = fieldref.render()
    return files


def drifted(directory: Path = SCHEMA_DIR) -> list[str]:
    """Generated files whose committed text differs from what the models generate."""
    return [
        str(path) for path, text in derived_files(directory).items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Regenerate the schema files and the field reference."""
    written = []
    for path, text in derived_files(directory).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
        written.append(path)
    return written
