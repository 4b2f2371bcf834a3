"""The one table of pass modules (``passes.registry.PASS_MODULES``) lists every module that
registers a pass or a named pipeline, and nothing else: a pass added without its table entry
would be missing from ``hector-opt``."""

from __future__ import annotations

import ast
from pathlib import Path

from hector.passes.registry import PASS_MODULES

ROOT = Path(__file__).resolve().parents[2]
REGISTERING = {"register_pass", "register_pipeline"}


def _registers(path: Path) -> bool:
    """Whether the module calls or decorates with a registration function at its top level."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        calls = [d for d in getattr(node, "decorator_list", [])]
        if isinstance(node, ast.Expr):
            calls.append(node.value)
        for call in calls:
            func = call.func if isinstance(call, ast.Call) else call
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in REGISTERING:
                return True
    return False


def test_every_registering_module_is_in_the_table() -> None:
    found = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for folder in ("passes", "lowering")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.stem != "registry" and "Output" not in path.parts and _registers(path)
    }
    assert found, "no registering module found: the scan is broken"
    assert found == set(PASS_MODULES)
