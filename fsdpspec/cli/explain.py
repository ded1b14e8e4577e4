"""`fsdpspec explain CODE` — one code's documentation: a lint rule's with its FAIL and
PASS examples, or a load/schema (FS0xx) code's."""

from __future__ import annotations

import click


@click.command("explain")
@click.argument("code")
def command(code: str) -> None:
    """Print one code's documentation (a lint rule's with a failing and a passing example)."""
    from fsdpspec.lint import RULES
    from fsdpspec.lint.docs import explain_text
    from fsdpspec.spec.codes import LOAD_CODES, explain_load_code

    key = code.strip().upper()
    if key in LOAD_CODES:
        click.echo(explain_load_code(LOAD_CODES[key]), nl=False)
        return
    rule = RULES.get(key)
    if rule is None:
        raise click.UsageError(f"no code {code!r}; `fsdpspec rules` lists the lint rules, "
                               "docs/architecture.md the FS0xx ones")
    click.echo(explain_text(rule), nl=False)
