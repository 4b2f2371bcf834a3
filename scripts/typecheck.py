#!/usr/bin/env python3
"""Type-check Hector with mypy, as the installed ``hector`` package.

The source folders map onto one package (``python/hector`` is ``hector``, ``dialects`` is
``hector.dialects``, ... — ``[tool.scikit-build.wheel.packages]`` in pyproject.toml). The
editable install resolves that with an import hook, which mypy cannot follow, so this script
lays the same layout out as symlinks under ``build/typecheck`` (mypy's ``mypy_path``), runs
mypy on the package, and prints its diagnostics with the paths of the source files.

Usage: ``python3 scripts/typecheck.py [extra mypy arguments]``; the exit status is mypy's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"


def package_map() -> dict[str, str]:
    """Return the wheel layout: package path (``hector/dialects``) -> source folder."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)
    return dict(project["tool"]["scikit-build"]["wheel"]["packages"])


def lay_out(packages: dict[str, str]) -> dict[str, str]:
    """Build the symlink tree; return tree-relative prefix -> source-relative prefix."""
    if TREE.exists():
        shutil.rmtree(TREE)
    TREE.mkdir(parents=True)
    prefixes: dict[str, str] = {}
    # Parents first, so a subpackage links inside its parent's real directory.
    for package, source in sorted(packages.items()):
        target = TREE / package
        target.mkdir(parents=True, exist_ok=True)
        for entry in sorted((ROOT / source).iterdir()):
            if entry.name == "__pycache__" or (target / entry.name).exists():
                continue
            (target / entry.name).symlink_to(entry)
        prefixes[f"{TREE.relative_to(ROOT)}/{package}/"] = f"{source}/"
    return prefixes


def source_path(line: str, prefixes: dict[str, str]) -> str:
    """Rewrite a diagnostic's tree path to the source file it links to."""
    for tree_prefix, source_prefix in sorted(prefixes.items(), key=lambda kv: -len(kv[0])):
        if line.startswith(tree_prefix):
            rest = line[len(tree_prefix) :]
            # A subpackage's own entry (hector/dialects/...) is matched by its longer prefix.
            return source_prefix + rest
    return line


def main(argv: list[str]) -> int:
    """Lay out the package, run mypy on it, and print its output with source paths."""
    prefixes = lay_out(package_map())
    env = dict(os.environ, MYPY_FORCE_COLOR="0")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in (proc.stdout + proc.stderr).splitlines():
        print(source_path(line, prefixes))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
