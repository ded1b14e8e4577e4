"""The winner as a spec file: the original document with the winner's `--set` lines
applied, comments kept (ruamel round trip), validated before it is written, written
whole or not at all (`fsdpspec.atomicio`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ruamel.yaml import YAML

from fsdpspec.atomicio import write_text
from fsdpspec.spec.diagnostics import Diagnostic
from fsdpspec.spec.load import SourceMap
from fsdpspec.spec.overrides import apply_overrides
from fsdpspec.spec.yamltext import dump_yaml
from fsdpspec.validate import check_file


class WinnerNotWritten(Exception):
    """Nothing was written: the target exists, or the rendered spec does not validate."""


def winner_text(source_text: str, overrides: Sequence[str]) -> str:
    """``source_text`` (an already validated spec) with ``overrides`` applied."""
    document = YAML(typ="rt").load(source_text)
    apply_overrides(document, list(overrides), SourceMap("--set"))
    return dump_yaml(document)


def _errors(text: str, target: Path) -> list[Diagnostic]:
    """Validate ``text`` as if it were ``target`` (its relative paths read from there)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".yaml", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return [d for d in check_file(Path(tmp)).diagnostics if d.is_error]
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_winner(source_text: str, overrides: Sequence[str], target: Path, *,
                 force: bool) -> None:
    """Write the winner to ``target``; WinnerNotWritten says why when it is not."""
    if (target.exists() or target.is_symlink()) and not force:
        raise WinnerNotWritten(f"{target} exists; pass --force to replace it")
    if not target.parent.is_dir():
        raise WinnerNotWritten(f"{target}: directory {target.parent} does not exist")
    text = winner_text(source_text, overrides)
    problems = _errors(text, target)
    if problems:
        first = problems[0]
        raise WinnerNotWritten(f"{target} not written: the winner does not validate there: "
                               f"{first.code} {first.message}")
    try:
        write_text(target, text)
    except OSError as exc:
        raise WinnerNotWritten(f"{target}: {exc.strerror or exc}") from None
