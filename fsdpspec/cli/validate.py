"""`fsdpspec validate FILE…` — every problem in every file, at file:line:col."""

from __future__ import annotations

from pathlib import Path

import click

from fsdpspec.cli.options import emit, format_option, resolve_format, set_option
from fsdpspec.diagnostic_formats import FORMATS
from fsdpspec.lint import RULES
from fsdpspec.lint.selection import matches_any
from fsdpspec.spec.overrides import OverrideError
from fsdpspec.validate import check_file


@click.command("validate")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@format_option(FORMATS)
@set_option
@click.option("--select", multiple=True, metavar="CODE",
              help="Only report rules whose code starts with this (repeatable).")
@click.option("--ignore", multiple=True, metavar="CODE",
              help="Skip rules whose code starts with this (repeatable).")
@click.option("--strict", is_flag=True, help="Warnings fail the check too.")
def command(files, output_format, overrides, select, ignore, strict) -> None:
    """Check job specs against the schema and the lint rules.

    Exit 0 when clean, 1 on any error (or warning with --strict), 2 on usage errors.
    """
    for prefix in (*select, *ignore):
        if not matches_any(prefix, list(RULES)):
            raise click.UsageError(f"{prefix!r} matches no lint rule (`fsdpspec rules` lists them)")
    try:
        reports = [check_file(Path(f), overrides, select=select, ignore=ignore) for f in files]
    except OverrideError as exc:
        raise click.UsageError(str(exc)) from None
    emit(reports, resolve_format(output_format))
    failing = any(d.is_error or (strict and d.severity.value == "warning")
                  for r in reports for d in r.diagnostics)
    raise SystemExit(1 if failing else 0)
