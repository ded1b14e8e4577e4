"""Renderers: one module per output format, each `render(reports) -> str`.

Rules and the pipeline never format text; renderers never judge. A format's module is
imported only when that format is asked for (`validate` prints one).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from fsdpspec.validate import FileReport

# Format → its module under fsdpspec.diagnostic_formats.
FORMATS: dict[str, str] = {
    "full": "full",
    "concise": "concise",
    "json": "json_format",
    "sarif": "sarif",
    "github": "github",
}

# Formats whose text is rich markup (coloured on a terminal, plain otherwise).
MARKUP = {"full"}


def render(output_format: str, reports: Sequence[FileReport]) -> str:
    """The reports in one format."""
    module = importlib.import_module(f"{__name__}.{FORMATS[output_format]}")
    return module.render(reports)
