"""The rule registry: each rule is a code, a severity, docs and a pure check()."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdpspec.diagnostics import Diagnostic, Severity
from fsdpspec.spec.v1 import JobSpec


@dataclass
class LintContext:
    """What a rule may read besides the spec."""

    spec: JobSpec
    base_dir: Path
    # HF-style config of the model (None for a factory model without geometry, or when
    # the config could not be read — that is reported once, by the pipeline).
    model_config: dict[str, Any] | None
    # Pointers the user wrote (so rules can tell an explicit value from a default).
    explicit: set[str] = field(default_factory=set)
    # Cached memory plan (fsdpspec.plan), computed on first use by the rules that need it.
    cache: dict[str, Any] = field(default_factory=dict)

    def is_set(self, pointer: str) -> bool:
        return pointer in self.explicit


Check = Callable[[LintContext], Iterator[Diagnostic]]


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str
    hint: str
    check: Check
    # The docstring of the check: the rule's user documentation with FAIL/PASS examples.
    doc: str


RULES: dict[str, Rule] = {}


def rule(code: str, name: str, severity: Severity, summary: str, hint: str):
    """Register ``check`` as a rule. Codes are unique and never reused."""

    def register(check: Check) -> Check:
        assert code not in RULES, f"duplicate rule code {code}"
        doc = (check.__doc__ or "").strip()
        RULES[code] = Rule(code, name, severity, summary, hint, check, doc)
        return check

    return register
