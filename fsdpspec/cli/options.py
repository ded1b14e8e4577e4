"""Options shared by several subcommands, and the one way they print diagnostics."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from fsdpspec.catalog.config_source import resolve_input_path
from fsdpspec.diagnostic_formats import MARKUP, render
from fsdpspec.spec.overrides import OverrideError
from fsdpspec.spec.v1 import INPUT_FIELDS
from fsdpspec.validate import FileReport, check_file


class FiniteRange(click.FloatRange):
    """A float within bounds, and finite: click's FloatRange lets `nan` through (it
    compares false with both bounds) and an unbounded side takes `inf` or `1e400`."""

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 - click's signature
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


# The budget flags of `plan` and `tune`: a budget and its cost stay finite (a price above
# a million per GPU-hour is a typo, and overflowed the cost to inf at 1e308).
TOKENS = FiniteRange(min=1, max=1e18)
PRICE = FiniteRange(min=0, min_open=True, max=1e6)

set_option = click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Override a field before validation (repeatable), e.g. fsdp.cpu_offload=true.",
)


def format_option(choices: Sequence[str]):
    return click.option(
        "--format", "output_format", type=click.Choice(list(choices)), default=None,
        help="Output format (default: full on a terminal, concise otherwise).",
    )


def resolve_format(output_format: str | None) -> str:
    if output_format is not None:
        return output_format
    return "full" if sys.stdout.isatty() else "concise"


def spec_inputs(report: FileReport) -> list[Path]:
    """The files a command on this spec reads: the spec and its local input paths (an
    output must never be one of them)."""
    assert report.spec is not None
    values = (field.value(report.spec) for field in INPUT_FIELDS)
    return [Path(report.file), *(resolve_input_path(value, report.base_dir)
                                 for value in values if value)]


def load_spec(path: str, overrides: Sequence[str]) -> FileReport:
    """Validate one file for a command that needs a spec; a bad --set is a usage error."""
    try:
        return check_file(Path(path), overrides)
    except OverrideError as exc:
        raise click.UsageError(str(exc)) from None


def emit(reports: Sequence[FileReport], output_format: str, *, err: bool = False) -> None:
    """Print diagnostics in one format (full: rich markup, colour on a terminal)."""
    text = render(output_format, reports)
    if output_format in MARKUP:
        from rich.console import Console

        Console(stderr=err, highlight=False, soft_wrap=True).print(text, end="")
    else:
        click.echo(text, nl=False, err=err)


def exit_on_errors(report: FileReport) -> None:
    """Commands that need a valid spec print its errors and stop with exit 1."""
    if report.has_errors or report.spec is None:
        emit([report], resolve_format(None), err=True)
        raise SystemExit(1)
