"""Where a command's text goes: stdout, or a file written whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomic(path: Path, text: str, *, executable: bool = False) -> None:
    """Write ``text`` to ``path`` through a temp file in the same directory and a
    rename, so a reader never sees half a file and a failure leaves none."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, (0o777 if executable else 0o666) & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def deliver(text: str, output: str | None, *, executable: bool = False) -> None:
    """Print ``text``, or write it to the file ``output`` (one-line error if it cannot)."""
    if output is None:
        click.echo(text, nl=False)
        return
    path = Path(output)
    if not path.parent.is_dir():
        raise click.ClickException(f"{output}: directory {path.parent} does not exist")
    if path.is_dir():
        raise click.ClickException(f"{output} is a directory")
    try:
        write_atomic(path, text, executable=executable)
    except OSError as exc:
        raise click.ClickException(f"{output}: {exc.strerror or exc}") from None
    click.echo(f"wrote {output}", err=True)


output_option = click.option(
    "-o", "--output", metavar="FILE", default=None,
    help="Write to FILE (atomically) instead of standard output.",
)
