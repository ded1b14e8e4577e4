"""The package map's boundaries (docs/architecture.md), checked on the source's imports:
every module imports only what its row of the "may import" table names, torch-free
`fsdpspec`, no import cycles (function-level imports included), and an install that adds
no generic top-level name."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

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


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (type hints, not imports)."""
    return {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            for stmt in node.body for inner in ast.walk(stmt)}


def _imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    hints = _type_checking_only(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in hints:
            continue
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


def _module_name(cell: str) -> str:
    """`fsdpspec/plan/` → fsdpspec.plan; `runners/engine/` → fsdpspec_runners.engine."""
    path = cell.strip("/").removesuffix(".py").replace("/", ".")
    return "fsdpspec_runners" + path[len("runners"):] if path.startswith("runners") else path


def _ours(name: str) -> str:
    """A table's short name (`spec.v1`, `semantics`) as a module name of ours."""
    return name if name.split(".")[0] in PACKAGES else f"fsdpspec.{name}"


def _table() -> dict[str, tuple[set[str] | None, set[str]]]:
    """Package → (what it may import, None for everything; what it may not), as the
    "may import" table of docs/architecture.md says."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("| package | its one job | may import |"):].split("\n\n")[0]
    rows: dict[str, tuple[set[str] | None, set[str]]] = {}
    for line in table.splitlines()[2:]:
        packages, _job, may = (cell.strip() for cell in line.strip("|").split("|"))
        named = re.findall(r"(not )?`([^`]+)`", may)
        allowed = None if may.startswith("everything") else {
            _ours(n) for neg, n in named if not neg and n.split(".")[0] not in HEAVY}
        denied = {_ours(n) for neg, n in named if neg}
        for cell in re.findall(r"`([^`]+)`", packages.split("(")[0]):
            rows[_module_name(cell)] = (allowed, denied)
    return rows


TABLE = _table()


def _row(module: str) -> str | None:
    """The most specific row of the table that ``module`` lies in."""
    found = [p for p in TABLE if module == p or module.startswith(p + ".")]
    return max(found, key=len, default=None)


def _within(name: str, prefixes: set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_every_module_has_a_row_of_the_table() -> None:
    assert [m for m in MODULES if m != "fsdpspec" and _row(m) is None] == []


def test_every_module_imports_only_what_its_row_names() -> None:
    offenders = []
    for module, imports in GRAPH.items():
        row = _row(module)
        if row is None:
            continue
        allowed, denied = TABLE[row]
        for imported, _ in imports:
            target = _internal(imported)
            if target is None or _within(target, {row}) or target == "fsdpspec":
                continue  # not ours, its own package, or the version
            if _within(target, denied) or (allowed is not None
                                             and not _within(target, allowed)):
                offenders.append(f"{module} ({row}) imports {target}")
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


# A feature's facet in each layer keeps the feature's name (its rules in lint/, its terms
# in plan/, its engine step in runners/engine/ …): one name, one feature. Any other
# basename is one module's alone, so a reader can tell rooms apart by name.
FEATURE_FACETS = {"checkpoint", "expert_parallel", "float8", "lora", "memory", "memory_levers",
                  "preference", "tensor_parallel"}


def test_no_two_modules_share_a_basename_for_different_things() -> None:
    from fsdpspec.cli.main import COMMANDS

    subcommands = {f"fsdpspec.cli.{module}" for module in COMMANDS.values()}
    owners: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        if path.stem not in ("__init__", "__main__") and module not in subcommands:
            owners.setdefault(path.stem, []).append(module)
    shared = {name: mods for name, mods in owners.items() if len(mods) > 1}
    assert {n: m for n, m in shared.items() if n not in FEATURE_FACETS} == {}
    # A facet of one feature per package, and no stale entry in the set above.
    assert all(len({m.rpartition(".")[0] for m in shared[n]}) == len(shared[n])
               for n in FEATURE_FACETS & shared.keys())
    assert FEATURE_FACETS <= shared.keys()


def test_no_two_test_files_share_a_basename() -> None:
    """tests/ has no packages: pytest imports each test file by its basename, so a second
    tests/*/test_x.py is a collection error of the whole suite (as the plan's and the
    engine's test_expert_parallel.py were), not a failure of one file."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {n: p for n, p in seen.items() if len(p) > 1} == {}
