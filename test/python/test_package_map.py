"""The package's map in docs/contributing.md is the code's: each unit drawn on the floor
``scripts/import_cycles.py`` computes from the imports, and the checks behind it fail on the
shapes they exist to refuse (a cycle between units, a private module imported from outside)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
#: A unit named in the diagram: ``tools/``, ``bundle.py``, ...
_UNIT = re.compile(r"\b([a-z_]+)(?:/|\.py)(?=[\s(]|$)")


def _import_cycles() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "import_cycles", ROOT / "scripts/import_cycles.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_cycles"] = module
    spec.loader.exec_module(module)
    return module


def _drawn_floors() -> dict[str, int]:
    """Unit → floor, read off the diagram under "The package's map"."""
    text = (ROOT / "docs/contributing.md").read_text(encoding="utf-8")
    section = text[text.index("### The package's map") :]
    diagram = section[section.index("```\n") + 4 :]
    diagram = diagram[: diagram.index("```")]
    floors: dict[str, int] = {}
    for line in diagram.splitlines():
        floor, _, rest = line.strip().partition(" ")
        if floor.isdigit():
            for name in _UNIT.findall(re.sub(r"\(.*?\)", "", rest)):
                floors[f"hector.{name}"] = int(floor)
    return floors


def test_the_drawn_map_is_the_codes() -> None:
    ic = _import_cycles()
    computed = ic.floors(ic.unit_graph(ic.import_graph()))
    assert _drawn_floors() == computed


def test_the_checks_refuse_a_cycle_between_units_and_a_private_import() -> None:
    ic = _import_cycles()
    graph = {
        "hector.data.graph": {"hector.targets.base"},
        "hector.targets.base": {"hector.data.loader"},
        "hector.data.loader": set(),
        "hector.tools.cli": {"hector.passes._hidden"},
        "hector.passes._hidden": set(),
        "hector.passes.pipeline": {"hector.passes._hidden"},
    }
    units = ic.unit_graph(graph)
    assert ic.cycles(graph) == []  # no cycle among the modules themselves
    assert ic.cycles(units) == [["hector.data", "hector.targets"]]
    assert ic.private_imports(graph) == ["hector.tools.cli -> hector.passes._hidden"]
