"""Renderers: one module per output format, each `render(reports) -> str`.

Rules and the pipeline never format text; renderers never judge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fsdpspec.report import concise, full, github, json_format, sarif
from fsdpspec.validate import FileReport

Renderer = Callable[[Sequence[FileReport]], str]

# Formats whose text is rich markup (coloured on a terminal, plain otherwise).
MARKUP = {"full"}

RENDERERS: dict[str, Renderer] = {
    "full": full.render,
    "concise": concise.render,
    "json": json_format.render,
    "sarif": sarif.render,
    "github": github.render,
}
