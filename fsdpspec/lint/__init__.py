"""Lint rules: cross-field judgement on a typed JobSpec (see registry.py)."""

from __future__ import annotations

from collections.abc import Sequence

from fsdpspec.diagnostics import Diagnostic
from fsdpspec.lint.registry import RULES, LintContext


def lint_spec(
    ctx: LintContext, *, select: Sequence[str] = (), ignore: Sequence[str] = ()
) -> list[Diagnostic]:
    """Run every registered rule on a spec."""
    found: list[Diagnostic] = []
    for rule in RULES.values():
        found.extend(rule.check(ctx))
    return found
