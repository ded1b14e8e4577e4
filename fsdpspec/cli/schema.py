"""`fsdpspec schema` — print, write or check the published JSON Schema."""

from __future__ import annotations

import click

from fsdpspec.spec import LATEST, generated
from fsdpspec.spec.schema import render


@click.command("schema")
@click.option("--check", is_flag=True,
              help="Fail if schema/, docs/spec.md or the compiled schemas differ from the models.")
@click.option("--write", is_flag=True,
              help="Regenerate schema/, docs/spec.md and the compiled schemas from the models.")
def command(check: bool, write: bool) -> None:
    """Print the JSON Schema of the newest spec version (for editors and CI)."""
    if check and write:
        raise click.UsageError("--check and --write exclude each other")
    if write:
        for path in generated.write():
            click.echo(f"wrote {path}")
        return
    if check:
        stale = generated.drifted()
        for path in stale:
            click.echo(f"{path}: out of date; run `fsdpspec schema --write`", err=True)
        raise SystemExit(1 if stale else 0)
    click.echo(render(LATEST), nl=False)
