#!/usr/bin/env python3
"""Check the size rules of docs/contributing.md; exit 1 and list every breach.

In the product (the package and the layers it installs: ``python/``, ``dialects/``,
``passes/``, ``lowering/``, ``runtime/``):

- no source file over 800 lines (Python and C++ alike);
- no Python function over 80 lines, from its ``def`` (decorators excluded) to its last line;
- no Python class over 20 methods (every ``def`` in the class body: dunders and properties too).

Beside the product (benchmarks, the fuzzer, scripts, examples, tests) the limits are 1,000
lines, 100 lines and 25 methods.

The rules are about the size of each piece a reader has to hold at once; the package as a
whole has no line budget.

Nothing is imported: files are read and parsed with :mod:`ast`. Usage:
``python3 scripts/code_size.py`` from anywhere in the checkout.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
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
#: The folders of the product, whose files keep the tighter :data:`PRODUCT` limits.
PRODUCT_FOLDERS = ("python", "dialects", "passes", "lowering", "runtime")


@dataclass(frozen=True)
class Limits:
    """The largest file (lines), function (lines) and class (methods) a folder allows."""

    file_lines: int
    function_lines: int
    class_methods: int


PRODUCT = Limits(file_lines=800, function_lines=80, class_methods=20)
ELSEWHERE = Limits(file_lines=1000, function_lines=100, class_methods=25)


def limits_of(rel: Path) -> Limits:
    """The limits for the file at ``rel`` (relative to the checkout)."""
    return PRODUCT if rel.parts[0] in PRODUCT_FOLDERS else ELSEWHERE


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
    """Functions and classes over the limits of ``path``'s folder (:func:`limits_of`)."""
    rel = path.relative_to(ROOT)
    limits = limits_of(rel)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limits.function_lines:
                yield f"{rel}:{node.lineno}: function {node.name} has {lines} lines"
        elif isinstance(node, ast.ClassDef):
            methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
            if methods > limits.class_methods:
                yield f"{rel}:{node.lineno}: class {node.name} has {methods} methods"


def breaches() -> list[str]:
    """Every breach of the rules, one line each, ``path:line: what``."""
    out = []
    for path in source_files():
        lines = line_count(path)
        rel = path.relative_to(ROOT)
        if lines > limits_of(rel).file_lines:
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
