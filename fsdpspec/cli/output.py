"""Where a command's text goes: stdout, or a file written whole or not at all."""

from __future__ import annotations

from pathlib import Path

import click

from fsdpspec.atomicio import write_text


def deliver(text: str, output: str | None, *, executable: bool = False) -> None:
    """Print ``text``, or write it to the file ``output`` (one-line error if it cannot)."""
    if output is None:
        click.echo(text, nl=False)
        return
    path = Path(output)
    if not path.parent.is_dir():
        raise click.ClickException(f"{output}: directory {path.parent} does not exist")
    try:
        write_text(path, text, executable=executable)
    except OSError as exc:
        raise click.ClickException(f"{output}: {exc.strerror or exc}") from None
    click.echo(f"wrote {output}", err=True)


output_option = click.option(
    "-o", "--output", metavar="FILE", default=None,
    help="Write to FILE (atomically) instead of standard output.",
)
