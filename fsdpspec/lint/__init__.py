"""Lint rules: cross-field judgement on a typed JobSpec (see registry.py).

Every module of this package other than the infrastructure below is a rule module;
importing it registers its rules. All are imported here, so adding a rule family is
adding a file, and the registry is complete wherever it is read (validate, `fsdpspec
rules`, docs/rules.md).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence

from fsdpspec.lint.registry import RULES, LintContext
from fsdpspec.lint.selection import selector
from fsdpspec.spec.diagnostics import Diagnostic

_INFRASTRUCTURE = {"registry", "selection", "docs"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _INFRASTRUCTURE:
        importlib.import_module(f"{__name__}.{_module.name}")


def lint_spec(
    ctx: LintContext, *, select: Sequence[str] = (), ignore: Sequence[str] = ()
) -> list[Diagnostic]:
    """Run the selected rules on a spec; the spec's `lint.ignore` adds to ``ignore``."""
    selected = selector(select, [*ignore, *ctx.spec.lint.ignore])
    found: list[Diagnostic] = []
    for rule in RULES.values():
        if selected(rule.code):
            found.extend(rule.check(ctx))
    return found
