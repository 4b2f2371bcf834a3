#!/usr/bin/env python3
"""Find import cycles among Hector's modules; exit 1 when there is one.

Every ``.py`` file under the package's source folders is parsed (nothing is imported) and every
``import``/``from ... import`` statement is read wherever it stands: at module level, inside
functions (a deferred import still ties the two modules together) and under
``if TYPE_CHECKING:`` (a type-only import is still a dependency, and hiding one there is how a
cycle gets papered over), with relative imports resolved against the file's ``hector.*`` name.
Only ``importlib.import_module`` calls are left out (the lazy ``hector`` package exports, the
target table and the pass registry's table of pass modules look modules up by name).
``from pkg import name`` counts as importing ``pkg.name`` when that is a module, else ``pkg``.
A package's ``__init__`` is not counted as imported by its submodules' imports (Python runs it
first, but a package importing its own submodules is the normal shape).

Two more rules hold at the level of the package's parts. A *unit* is a subpackage of
``hector`` (``hector.data``, ``hector.lowering``, ...) or one of its top-level modules
(``hector.bundle``, ...): the units must import each other without a cycle, so each stands on
its own floor (``--graph`` prints the floors, bottom first) with arrows only downward. And no
``_``-prefixed module is imported from outside the package that holds it: what another package
needs is public. The developer packages beside the product (``hector_bench``, ``hector_fuzz``)
stand above it and are not units (the ``hector bench`` command loads its plugin from them).

Usage: ``python3 scripts/import_cycles.py [--graph]`` from anywhere in the checkout.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Source folder → the package name it is installed as (pyproject.toml's wheel.packages).
PACKAGES: dict[str, str] = {
    "python/hector": "hector",
    "benchmarks/hector_bench": "hector_bench",
    "fuzz/hector_fuzz": "hector_fuzz",
    "dialects": "hector.dialects",
    "passes": "hector.passes",
    "lowering": "hector.lowering",
    "runtime": "hector.runtime",
}


def module_files() -> dict[str, tuple[Path, bool]]:
    """``hector.*`` module name → (file, is a package ``__init__``)."""
    out: dict[str, tuple[Path, bool]] = {}
    for folder, package in PACKAGES.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if any(not p.isidentifier() for p in parts):
                continue
            name = ".".join([package, *parts])
            # A subfolder of python/hector that is also installed on its own keeps that name.
            out.setdefault(name, (path, path.name == "__init__.py"))
    return out


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``: module level, in functions, under ``TYPE_CHECKING``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name of ``from <level dots><node.module> import ...`` in ``module``."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def import_graph() -> dict[str, set[str]]:
    """Module → the Hector modules it imports."""
    files = module_files()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, (path, is_package) in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(name, is_package, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in files else base)
            for target in targets:
                # "import hector.passes.verify" names a module; walk up to one we know.
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One concrete cycle through the component's first module, for the report."""
    members = set(component)
    start = component[0]
    path = [start]
    seen = {start}

    def walk(v: str) -> bool:
        for w in sorted(graph[v] & members):
            if w == start:
                return True
            if w not in seen:
                seen.add(w)
                path.append(w)
                if walk(w):
                    return True
                path.pop()
        return False

    walk(start)
    return [*path, start]


def unit(module: str) -> str | None:
    """The unit of the product a module belongs to (``hector.data.loader`` → ``hector.data``);
    None for the ``hector`` package itself and for the developer packages."""
    parts = module.split(".")
    if parts[0] != "hector" or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Unit → the other units its modules import."""
    out: dict[str, set[str]] = {}
    for name, targets in graph.items():
        here = unit(name)
        if here is None:
            continue
        out.setdefault(here, set())
        for target in targets:
            there = unit(target)
            if there is not None and there != here:
                out[here].add(there)
    return out


def floors(units: dict[str, set[str]]) -> dict[str, int]:
    """Each unit's floor: 0 for one that imports no other unit, else one above the highest
    floor it imports (the graph must be acyclic)."""
    floor: dict[str, int] = {}

    def height(u: str) -> int:
        if u not in floor:
            floor[u] = 1 + max((height(v) for v in units[u]), default=-1)
        return floor[u]

    for u in sorted(units):
        height(u)
    return floor


def private_imports(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> module`` for each ``_``-prefixed module imported from outside its package."""
    found = []
    for name in sorted(graph):
        for target in sorted(graph[name]):
            package, _, leaf = target.rpartition(".")
            private = leaf.startswith("_") and not leaf.startswith("__")
            if private and name != package and not name.startswith(package + "."):
                found.append(f"{name} -> {target}")
    return found


def main(argv: list[str] | None = None) -> int:
    """Print each cycle (modules, then units) and each private import; exit 1 if any."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", action="store_true", help="print the import graph and the floors")
    args = p.parse_args(argv)
    graph = import_graph()
    units = unit_graph(graph)
    if args.graph:
        for name in sorted(graph):
            print(f"{name}: {', '.join(sorted(graph[name])) or '-'}")
    failed = False
    for component in cycles(graph):
        failed = True
        print(f"import cycle among {len(component)} modules: {', '.join(component)}")
        print("  e.g. " + " -> ".join(_a_cycle(graph, component)))
    for component in cycles(units):
        failed = True
        print(f"import cycle among {len(component)} units: {', '.join(component)}")
        print("  e.g. " + " -> ".join(_a_cycle(units, component)))
    for line in private_imports(graph):
        failed = True
        print(f"private module imported from outside its package: {line}")
    if failed:
        return 1
    if args.graph:
        floor = floors(units)
        print("floors of the package's units, bottom first (each imports only lower floors):")
        for level in range(max(floor.values()) + 1):
            names = sorted(u.removeprefix("hector.") for u, f in floor.items() if f == level)
            print(f"  {level}: {', '.join(names)}")
    print(f"no import cycles among {len(graph)} Hector modules or {len(units)} units")
    return 0


if __name__ == "__main__":
    sys.exit(main())
