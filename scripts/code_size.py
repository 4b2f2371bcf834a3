#!/usr/bin/env python3
"""Check the size rules of docs/contributing.md; exit 1 and list every breach.

- no source file over 1,000 lines (Python, C++, TableGen-free MLIR tests and scripts alike);
- no Python function over 100 lines, from its ``def`` (decorators excluded) to its last line;
- no Python class over 25 methods (every ``def`` in the class body: dunders and properties too).

The rules are about the size of each piece a reader has to hold at once; the package as a
whole has no line budget.

Nothing is imported: files are read and parsed with :mod:`ast`. Usage:
``python3 scripts/code_size.py`` from anywhere in the checkout.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Folders whose files are source, and the suffixes that count as source there.
SOURCE_FOLDERS = (
    "python",
    "dialects",
    "passes",
    "lowering",
    "runtime",
    "benchmarks",
    "fuzz",
    "scripts",
    "examples",
    "test",
)
SOURCE_SUFFIXES = (".py", ".cpp", ".h", ".mlir", ".sh", ".test")
MAX_FILE_LINES = 1000
MAX_FUNCTION_LINES = 100
MAX_CLASS_METHODS = 25


def source_files() -> Iterator[Path]:
    """Every tracked-looking source file: lit's ``Output`` folders and caches are skipped."""
    for folder in SOURCE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            skipped = {"Output", "__pycache__", ".pytest_cache"}
            if path.suffix in SOURCE_SUFFIXES and path.is_file() and not skipped & set(path.parts):
                yield path


def line_count(path: Path) -> int:
    """Lines in ``path`` (a last line without a newline counts)."""
    return len(path.read_text(encoding="utf-8", errors="replace").splitlines())


def python_breaches(path: Path) -> Iterator[str]:
    """Functions over :data:`MAX_FUNCTION_LINES` and classes over :data:`MAX_CLASS_METHODS`."""
    rel = path.relative_to(ROOT)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                yield f"{rel}:{node.lineno}: function {node.name} has {lines} lines"
        elif isinstance(node, ast.ClassDef):
            methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
            if methods > MAX_CLASS_METHODS:
                yield f"{rel}:{node.lineno}: class {node.name} has {methods} methods"


def breaches() -> list[str]:
    """Every breach of the rules, one line each, ``path:line: what``."""
    out = []
    for path in source_files():
        lines = line_count(path)
        rel = path.relative_to(ROOT)
        if lines > MAX_FILE_LINES:
            out.append(f"{rel}:1: file has {lines} lines")
        if path.suffix == ".py":
            out.extend(python_breaches(path))
    return out


def main() -> int:
    """Print the breaches; 0 when there are none."""
    found = breaches()
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} size rule breach(es); see docs/contributing.md", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
