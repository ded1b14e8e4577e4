"""The importers: one declared list of the source kinds `fsdpspec import` reads, which
the CLI, the docs' tests and the corpus tests read. Each kind's module (one per source,
``fsdpspec.convert.<kind>``) provides `ImportConfig`; it is imported only when used."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fsdpspec.convert.draft import Assumptions
from fsdpspec.convert.importer import Imported


class ImportConfig(Protocol):
    """An importer's contract: the file at ``path`` as a commented v1 spec; raises
    SourceError (a file it cannot read), ModelNeeded or ImportRefused."""

    def __call__(self, path: Path, *, name: str, assumed: Assumptions,
                 base_dir: Path) -> Imported: ...


@dataclass(frozen=True)
class Importer:
    kind: str

    def import_config(self) -> ImportConfig:
        return importlib.import_module(f"{__package__}.{self.kind}").import_config


# accelerate: a config YAML; trainer: an HF Trainer launch script or TrainingArguments
# JSON/YAML; axolotl: a YAML; torchtitan: a TOML.
IMPORTERS = tuple(Importer(kind) for kind in ("accelerate", "trainer", "axolotl", "torchtitan"))
KINDS = tuple(i.kind for i in IMPORTERS)


def importer(kind: str) -> Importer:
    """The importer of ``kind`` (one of `KINDS`)."""
    return next(i for i in IMPORTERS if i.kind == kind)
