"""The dialect reference pages are generated from the definitions and kept in sync."""

from __future__ import annotations

from pathlib import Path

from mlir import ir

from hector.dialects import DIALECTS, make_context
from hector.dialects.docs import render

DOCS = Path(__file__).resolve().parents[2] / "docs" / "dialects"


def test_committed_docs_match_definitions() -> None:
    for name, text in render().items():
        path = DOCS / name
        assert path.exists(), f"missing {path}; run python -m hector.dialects.docs"
        assert path.read_text() == text, f"{path} is stale; run python -m hector.dialects.docs"


def test_every_op_is_documented_with_a_parsing_example() -> None:
    ctx = make_context()
    for dialect in DIALECTS:
        for op in dialect.ops:
            assert op.summary
            assert op.description.strip()
            assert op.example
            with ctx:
                module = ir.Module.parse(op.example)
                assert f"{dialect.name}.{op.name}" in str(module)
