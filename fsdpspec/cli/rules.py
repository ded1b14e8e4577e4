"""`fsdpspec rules` — every lint rule: code, severity, summary (or docs/rules.md)."""

from __future__ import annotations

import click


@click.command("rules")
@click.option("--markdown", is_flag=True, help="Print docs/rules.md (generated from the rules).")
def command(markdown: bool) -> None:
    """List every lint rule with its code, severity and summary."""
    from fsdpspec.lint import RULES
    from fsdpspec.lint.docs import rules_markdown

    if markdown:
        click.echo(rules_markdown(), nl=False)
        return
    for rule in sorted(RULES.values(), key=lambda r: r.code):
        click.echo(f"{rule.code}  {rule.severity.value:<7}  {rule.name:<28}  {rule.summary}")
