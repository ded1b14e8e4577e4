"""Lint rules: cross-field judgement on a typed JobSpec (see registry.py).

Importing a rule module registers its rules; every module is imported here so that the
registry is complete wherever it is read (validate, `fsdpspec rules`, docs/rules.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from fsdpspec.diagnostics import Diagnostic
from fsdpspec.lint import (  # noqa: F401  (imported to register their rules)
    checkpoint,
    data,
    hygiene,
    precision,
    sharding,
    topology,
    version,
    wrapping,
)
from fsdpspec.lint.registry import RULES, LintContext
from fsdpspec.lint.selection import is_selected


def lint_spec(
    ctx: LintContext, *, select: Sequence[str] = (), ignore: Sequence[str] = ()
) -> list[Diagnostic]:
    """Run the selected rules on a spec; the spec's `lint.ignore` adds to ``ignore``."""
    ignored = [*ignore, *ctx.spec.lint.ignore]
    found: list[Diagnostic] = []
    for rule in RULES.values():
        if is_selected(rule.code, select, ignored):
            found.extend(rule.check(ctx))
    return found
