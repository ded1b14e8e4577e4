"""The package map's boundaries (docs/architecture.md), checked on the source's imports:
torch-free `fsdpspec`, planner and rules independent of the runners, runners independent
of the CLI, no import cycles (function-level imports included), and an install that adds
no generic top-level name."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import ROOT

# Import name → source folder, as pyproject's package-dir installs them.
PACKAGES = {"fsdpspec": ROOT / "fsdpspec", "fsdpspec_runners": ROOT / "runners"}
HEAVY = ("torch", "transformers", "safetensors", "datasets")


def _modules() -> dict[str, Path]:
    found = {}
    for name, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [name, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for alias in node.names:
                child = f"{base}.{alias.name}"
                out.append((child if child in MODULES else base, id(node) in top))
    return out


def _internal(name: str) -> str | None:
    """The nearest module of ours that ``name`` is or lies in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


GRAPH = {m: [(imp, top) for imp, top in _imports(m, p)] for m, p in MODULES.items()}


def test_fsdpspec_never_imports_heavy_packages_at_module_level() -> None:
    offenders = [f"{m} imports {imp}" for m, imps in GRAPH.items() if m.startswith("fsdpspec.")
                 or m == "fsdpspec" for imp, top in imps
                 if top and imp.split(".")[0] in HEAVY]
    assert offenders == []


@pytest.mark.parametrize("package", ["fsdpspec.plan", "fsdpspec.lint", "fsdpspec.spec",
                                     "fsdpspec.catalog", "fsdpspec.convert", "fsdpspec.tune"])
def test_torch_free_packages_never_import_the_runners(package: str) -> None:
    offenders = [f"{m} imports {imp}" for m, imps in GRAPH.items()
                 if m == package or m.startswith(package + ".")
                 for imp, _ in imps if imp.split(".")[0] == "fsdpspec_runners"]
    assert offenders == []


def test_runners_never_import_the_cli() -> None:
    offenders = [f"{m} imports {imp}" for m, imps in GRAPH.items()
                 if m.startswith("fsdpspec_runners") for imp, _ in imps
                 if imp.startswith("fsdpspec.cli")]
    assert offenders == []


def test_no_import_cycles() -> None:
    """Depth-first search over every import of ours, function-level ones included (they
    only hide a cycle from the interpreter, not from the design)."""
    edges = {m: sorted({t for imp, _ in imps if (t := _internal(imp)) and t != m})
             for m, imps in GRAPH.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in edges[node]:
            # A package's __init__ re-exporting its own modules is not a cycle of design.
            if nxt.startswith(node + "."):
                continue
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_pyproject_installs_every_package_of_the_tree() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: ROOT / path for name, path in config["package-dir"].items()}
    assert folders == PACKAGES
    packages = sorted(m for m, p in MODULES.items() if p.name == "__init__.py")
    assert sorted(config["packages"]) == packages


def test_install_adds_no_generic_top_level_name(tmp_path: Path) -> None:
    """Outside the checkout, `runners` is not importable while the engine is."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = ("import importlib.util as u; "
             "print(u.find_spec('runners') is None, u.find_spec('fsdpspec_runners.engine') "
             "is not None)")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["True", "True"], result.stderr
