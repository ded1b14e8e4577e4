"""Where a command's output goes: stdout, or a file written whole or not at all."""

from __future__ import annotations

from pathlib import Path

import click

from fsdpspec.atomicio import describe_error, write_bytes


def write_output(output: str | Path, data: bytes, *, executable: bool = False,
                 replace: bool = True) -> None:
    """Write ``data`` to the file ``output`` through the one writer; a one-line error
    naming it if it cannot (a missing directory, a FIFO, an existing file without
    --force …)."""
    path = Path(output)
    if not path.parent.is_dir():
        raise click.ClickException(f"{output}: directory {path.parent} does not exist")
    try:
        write_bytes(path, data, executable=executable, replace=replace)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        reason = describe_error(exc) if isinstance(exc, OSError) else str(exc)
        raise click.ClickException(f"{output}: {reason}") from None
    click.echo(f"wrote {output}", err=True)


def deliver(text: str, output: str | None, *, executable: bool = False,
            replace: bool = True) -> None:
    """Print ``text``, or write it to the file ``output`` (one-line error if it cannot)."""
    if output is None:
        click.echo(text, nl=False)
        return
    write_output(output, text.encode("utf-8"), executable=executable, replace=replace)


output_option = click.option(
    "-o", "--output", metavar="FILE", default=None,
    help="Write to FILE (atomically) instead of standard output.",
)

force_option = click.option(
    "--force", is_flag=True, default=False,
    help="Replace an existing output (without it, an existing one is refused).",
)
