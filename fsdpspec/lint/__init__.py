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
from functools import cache

from fsdpspec.lint.registry import RULES, LintContext, Rule
from fsdpspec.lint.selection import is_selected
from fsdpspec.spec.diagnostics import Diagnostic

_INFRASTRUCTURE = {"registry", "selection", "docs"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _INFRASTRUCTURE:
        importlib.import_module(f"{__name__}.{_module.name}")


def lint_spec(
    ctx: LintContext, *, select: Sequence[str] = (), ignore: Sequence[str] = ()
) -> list[Diagnostic]:
    """Run the selected rules on a spec; the spec's `lint.ignore` adds to ``ignore``."""
    found: list[Diagnostic] = []
    for rule in _selected(tuple(select), (*ignore, *ctx.spec.lint.ignore)):
        found.extend(rule.check(ctx))
    return found


@cache
def _selected(select: tuple[str, ...], ignore: tuple[str, ...]) -> tuple[Rule, ...]:
    """The rules a selection runs: the same for every file of a `validate` call."""
    return tuple(rule for rule in RULES.values() if is_selected(rule.code, select, ignore))
