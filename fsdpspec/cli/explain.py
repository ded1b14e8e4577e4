"""`fsdpspec explain CODE` — one rule's documentation, with its FAIL and PASS examples."""

from __future__ import annotations

import click


@click.command("explain")
@click.argument("code")
def command(code: str) -> None:
    """Print one rule's documentation, with a failing and a passing example."""
    from fsdpspec.lint import RULES
    from fsdpspec.lint.docs import explain_text

    rule = RULES.get(code.strip().upper())
    if rule is None:
        raise click.UsageError(f"no rule {code!r}; `fsdpspec rules` lists them")
    click.echo(explain_text(rule), nl=False)
