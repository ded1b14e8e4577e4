"""The engine reads derived facts from the recorded job, and the raw spec only for what
nothing derives: every `spec.` attribute chain under runners/engine (and every name
bound to one) is on docs/architecture.md's list, the list holds no derived fact, and no
entry is stale."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "runners" / "engine"
DOC = ROOT / "docs" / "architecture.md"
# Facts the Job derives (layout, batch, units): the engine reads them from the job.
DERIVED = {"fsdp.version", "fsdp.sharding_strategy", "fsdp.shard_group_size",
           "fsdp.activation_checkpointing", "fsdp.ac_every", "data.micro_batch_size",
           "data.global_batch_size", "data.seq_len", "resources", "world_size"}


def _chain(node: ast.AST) -> tuple[str | None, list[str]]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), parts[::-1]


def _spec_path(base: str | None, parts: list[str], aliases: dict[str, list[str]]) -> list[str]:
    """The spec fields ``base.parts`` reads: after a ``spec`` name or attribute, or
    after a name bound to such a chain; empty for anything else."""
    if base == "spec":
        return parts
    if "spec" in parts:
        return parts[parts.index("spec") + 1:]
    return aliases.get(base, []) + parts if base in aliases else []


def spec_reads(source: str) -> set[str]:
    """Each read as ``section`` or ``section.field``."""
    tree = ast.parse(source)
    aliases: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            pairs = [(target, value)]
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                pairs = list(zip(target.elts, value.elts, strict=False))
            for name, bound in pairs:
                if isinstance(name, ast.Name) and isinstance(bound, ast.Attribute):
                    path = _spec_path(*_chain(bound), {})
                    if path:
                        aliases[name.id] = path
    inner = {id(n.value) for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)}
    return {".".join(path[:2]) for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and id(n) not in inner
            for path in [_spec_path(*_chain(n), aliases)] if path}


def documented() -> set[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### The engine's raw spec reads", 1)[1].split("\n## ", 1)[0]
    bullets = [line.split(":", 1)[1] for line in section.splitlines() if line.startswith("- ")]
    return {token for line in bullets for token in re.findall(r"`([a-z_.]+)`", line)}


def test_the_scan_sees_direct_chains_and_bound_names() -> None:
    source = ("def f(job):\n    fsdp, lay = job.spec.fsdp, job.layout\n"
              "    return fsdp.version, spec.data.seq_len, job.spec.peft is None, lay.strategy\n")
    assert spec_reads(source) == {"fsdp", "fsdp.version", "data.seq_len", "peft"}


def test_the_engine_reads_only_the_documented_raw_fields() -> None:
    found = {read: path.name for path in sorted(ENGINE.glob("*.py"))
             for read in spec_reads(path.read_text(encoding="utf-8"))}
    listed = documented()
    assert not listed & DERIVED, f"derived facts on the raw list: {listed & DERIVED}"
    assert not found.keys() & DERIVED, {r: found[r] for r in found.keys() & DERIVED}
    unlisted = {r: found[r] for r in found.keys() - listed}
    assert not unlisted, f"raw spec reads missing from docs/architecture.md: {unlisted}"
    assert not listed - found.keys(), f"stale entries: {listed - found.keys()}"
