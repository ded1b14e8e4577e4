"""The rule registry: each rule is a code, a severity, docs and a pure check()."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdpspec.job.geometry import Geometry
from fsdpspec.job.job import Job
from fsdpspec.spec.diagnostics import Diagnostic, Severity
from fsdpspec.spec.v1 import JobSpec


@dataclass
class LintContext:
    """What a rule may read besides the spec: the resolved job."""

    job: Job
    # Pointers the user wrote (so rules can tell an explicit value from a default).
    explicit: set[str] = field(default_factory=set)
    # Cached memory plan (fsdpspec.plan), computed on first use by the rules that need it.
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> JobSpec:
        return self.job.spec

    @property
    def base_dir(self) -> Path:
        return self.job.base_dir

    @property
    def model_config(self) -> dict[str, Any] | None:
        """HF-style config of the model (None for a factory model without geometry, or
        when the config could not be read — that is reported once, by the pipeline)."""
        return self.job.config

    def is_set(self, pointer: str) -> bool:
        return pointer in self.explicit

    def first_set(self, *pointers: str) -> str:
        """The first pointer the user wrote, else the first: a finding about a default
        value points at the related field that was written."""
        return next((p for p in pointers if self.is_set(p)), pointers[0])

    def geometry(self) -> Geometry | None:
        """The model's shape, or None when it cannot be counted (a factory model without
        geometry, or a config the planner rejects — reported by the memory rules)."""
        return self.job.geometry


Check = Callable[[LintContext], Iterator[Diagnostic]]


@dataclass(frozen=True)
class Rule:
    """A registered rule: its code, name, severity, one-line summary, hint and check."""

    code: str
    name: str
    severity: Severity
    summary: str
    hint: str
    check: Check

    @property
    def doc(self) -> str:
        """The docstring of the check: the rule's user documentation with FAIL/PASS
        examples (cleaned when read: `validate` never reads it)."""
        return inspect.cleandoc(self.check.__doc__ or "")


RULES: dict[str, Rule] = {}


def rule(code: str, name: str, severity: Severity, summary: str, hint: str):
    """Register ``check`` as a rule. Codes are unique and never reused."""

    def register(check: Check) -> Check:
        assert code not in RULES, f"duplicate rule code {code}"
        RULES[code] = Rule(code, name, severity, summary, hint, check)
        return check

    return register


def diagnostic(code: str, message: str, path: str, hint: str | None = None) -> Diagnostic:
    """A finding of the registered rule ``code``, with its severity and (by default) its
    hint, so a rule states its severity once, in its decorator."""
    found = RULES[code]
    return Diagnostic(code, found.severity, message, path, hint or found.hint)
