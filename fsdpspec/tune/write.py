"""The winner as a spec: the original document with the winner's `--set` lines applied,
comments kept (ruamel round trip), validated as the file it will be before the command
writes it (through `fsdpspec.cli.output`, the one rule for every -o)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ruamel.yaml import YAML

from fsdpspec.spec.load import SourceMap, parse_text
from fsdpspec.spec.overrides import apply_overrides
from fsdpspec.spec.yamltext import dump_yaml
from fsdpspec.validate import check_loaded


class WinnerNotWritten(Exception):
    """The rendered spec does not validate where it would be written."""


def winner_text(source_text: str, overrides: Sequence[str]) -> str:
    """``source_text`` (an already validated spec) with ``overrides`` applied."""
    document = YAML(typ="rt").load(source_text)
    apply_overrides(document, list(overrides), SourceMap("--set"))
    return dump_yaml(document)


def validated_winner(source_text: str, overrides: Sequence[str], target: Path) -> str:
    """The winner's text, validated as if it were ``target`` (its relative paths read
    from there; nothing is written); WinnerNotWritten when it does not validate."""
    text = winner_text(source_text, overrides)
    report = check_loaded(parse_text(text, str(target)), target)
    problems = [d for d in report.diagnostics if d.is_error]
    if problems:
        first = problems[0]
        raise WinnerNotWritten(f"{target} not written: the winner does not validate there: "
                               f"{first.code} {first.message}")
    return text
