"""A rule's documentation, read from its docstring: prose, then a FAIL and a PASS YAML
example (indented blocks under `FAIL:` / `PASS:` lines). `fsdpspec explain`, docs/rules.md
and the tests that run every example all read it through here."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from fsdpspec.lint.registry import RULES, Rule

EXAMPLE_LABELS = ("FAIL", "PASS")
FAMILIES = {
    "FS1": "Sharding, topology and launch",
    "FS2": "Memory and resources",
    "FS3": "Precision",
    "FS4": "Checkpoints and I/O",
    "FS5": "Data and optimisation",
    "FS9": "FSDP version and deprecation",
}


@dataclass(frozen=True)
class RuleDoc:
    """A rule's documentation split into prose and its labelled YAML examples."""

    prose: str
    examples: dict[str, str]


def parse_doc(doc: str) -> RuleDoc:
    """Split a (dedented) rule docstring at its `FAIL:` / `PASS:` lines."""
    prose: list[str] = []
    examples: dict[str, list[str]] = {}
    current = prose
    for line in doc.splitlines():
        label = line.rstrip(":")
        if line.endswith(":") and label in EXAMPLE_LABELS:
            current = examples.setdefault(label, [])
        else:
            current.append(line)
    return RuleDoc(
        "\n".join(prose).strip(),
        {label: textwrap.dedent("\n".join(lines)).strip() + "\n"
         for label, lines in examples.items()},
    )


def explain_text(rule: Rule) -> str:
    """Plain text for `fsdpspec explain CODE`."""
    head = f"{rule.code} {rule.name} ({rule.severity.value}): {rule.summary}"
    return f"{head}\n\n{rule.doc}\n\nFix: {rule.hint}\n"


def _rule_markdown(rule: Rule) -> list[str]:
    doc = parse_doc(rule.doc)
    out = [f"### {rule.code}", "", f"`{rule.name}` · {rule.severity.value} · {rule.summary}",
           "", doc.prose, "", f"**Fix:** {rule.hint}", ""]
    for label, text in doc.examples.items():
        out += [f"{label}:", "", "```yaml", text.rstrip("\n"), "```", ""]
    return out


def rules_markdown() -> str:
    """docs/rules.md: every registered rule, by family, in code order."""
    out = ["# Lint rules", "",
           "Generated from the rule registry by `fsdpspec rules --markdown`; do not edit.",
           "Each example is a fragment of a job spec; the tests run every one.", ""]
    out += ["| code | name | severity | summary |", "|---|---|---|---|"]
    ordered = sorted(RULES.values(), key=lambda r: r.code)
    out += [f"| [{r.code}](#{r.code.lower()}) | {r.name} | "
            f"{r.severity.value} | {r.summary} |" for r in ordered]
    for prefix, title in FAMILIES.items():
        family = [r for r in ordered if r.code.startswith(prefix)]
        if family:
            out += ["", f"## {prefix}xx — {title}", ""]
            for r in family:
                out += _rule_markdown(r)
    return "\n".join(out).rstrip("\n") + "\n"
