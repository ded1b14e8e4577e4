"""Where a command's output goes: stdout, or a file written whole or not at all.

The one rule for every `-o`: a new name is written; an existing regular file is
replaced only with --force, and never when it is one of the command's own inputs (the
spec being exported, the config being imported: same inode, through any symlink or hard
link); anything else (a FIFO, a device, a directory, a symlink) is refused. Every
refusal, a name the filesystem cannot hold included, is one line coded OUTPUT_REFUSED.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import click

from fsdpspec.atomicio import check_target, describe_error, write_bytes

# The code of an output that cannot be written where -o says (fsdpspec/spec/codes.py).
OUTPUT_REFUSED = "FS049"


def json_text(data: object, *, ensure_ascii: bool = True) -> str:
    """The one writer of the JSON a command prints: strict JSON, where a NaN or an
    infinity (which json.dumps writes as the non-JSON `NaN`, `Infinity`) is a bug that
    raises instead."""
    return json.dumps(data, indent=2, ensure_ascii=ensure_ascii, allow_nan=False) + "\n"


def shown(name: str | Path) -> str:
    """A path as a message shows it: as typed, or quoted when it holds a newline or
    another unprintable character (the message stays one line)."""
    name = str(name)
    return name if name.isprintable() else ascii(name)


def _refused(output: str | Path, reason: str) -> click.ClickException:
    return click.ClickException(f"{OUTPUT_REFUSED} {shown(output)}: {reason}")


def _is_input(path: Path, inputs: Iterable[str | Path]) -> bool:
    """Whether ``path`` names the same file as one of ``inputs`` (os.stat follows
    symlinks on both sides; a hard link has the same inode)."""
    try:
        target = os.stat(path)
    except (OSError, ValueError):
        return False
    for given in inputs:
        try:
            source = os.stat(given)
        except (OSError, ValueError):
            continue
        if (source.st_dev, source.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def check_output(output: str | Path, *, replace: bool = True,
                 inputs: Iterable[str | Path] = ()) -> None:
    """Refuse (one coded line) an ``output`` that :func:`write_output` would refuse,
    before any work is done or any other output is written."""
    path = Path(output)
    try:
        if _is_input(path, inputs):
            raise _refused(output, "it is an input of this command; write the output "
                           "elsewhere")
        if not path.parent.is_dir():
            raise _refused(output, f"directory {shown(path.parent)} does not exist")
        check_target(path, replace=replace)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise _refused(output, describe_error(exc) if isinstance(exc, OSError)
                       else str(exc)) from None


def write_output(output: str | Path, data: bytes, *, executable: bool = False,
                 replace: bool = True, inputs: Iterable[str | Path] = ()) -> None:
    """Write ``data`` to the file ``output`` through the one writer, by the rule above;
    one coded line naming it if it cannot."""
    inputs = tuple(inputs)
    check_output(output, replace=replace, inputs=inputs)
    try:
        write_bytes(Path(output), data, executable=executable, replace=replace)
    except (OSError, ValueError) as exc:
        raise _refused(output, describe_error(exc) if isinstance(exc, OSError)
                       else str(exc)) from None
    click.echo(f"wrote {shown(output)}", err=True)


def deliver(text: str, output: str | None, *, executable: bool = False,
            replace: bool = True, inputs: Iterable[str | Path] = ()) -> None:
    """Print ``text``, or write it to the file ``output`` (one-line error if it cannot)."""
    if output is None:
        click.echo(text, nl=False)
        return
    write_output(output, text.encode("utf-8"), executable=executable, replace=replace,
                 inputs=inputs)


output_option = click.option(
    "-o", "--output", metavar="FILE", default=None,
    help="Write to FILE (atomically) instead of standard output.",
)

force_option = click.option(
    "--force", is_flag=True, default=False,
    help="Replace an existing output (without it, an existing one is refused).",
)
