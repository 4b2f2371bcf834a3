"""The docs name files that exist, by their source paths, and link to pages and headings that exist.

Checked in README.md and every page under docs/: each backticked path into the repository's own
folders (``runtime/bundle.py``, ``test/lowering/*.mlir``, ``scripts/``) names a file or folder of
the tree; no page names a file by its installed path (``hector/runtime/bundle.py`` is
``runtime/bundle.py`` in the checkout: pyproject.toml's wheel layout maps the folders); every
relative Markdown link reaches a file, and its ``#anchor`` a heading of that file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

#: The repository's own top-level folders: a backticked path starting with one is a claim
#: about this tree.
SOURCE_FOLDERS = (
    "benchmarks",
    "dialects",
    "docs",
    "examples",
    "fuzz",
    "lowering",
    "passes",
    "python",
    "runtime",
    "scripts",
    "test",
)

#: Paths the docs name in another project's tree (PyG's tests and examples, fetched by the user).
FOREIGN_PATHS = frozenset(
    {
        "examples/hetero/hetero_conv_dblp.py",
        "examples/hetero/han_imdb.py",
        "test/nn/conv/test_rgcn_conv.py",
        "test/nn/conv/test_hetero_conv.py",
        "test/nn/test_to_hetero_transformer.py",
    }
)

_CODE = re.compile(r"`([^`\s]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
# A file name with an extension, or a folder written with its trailing slash.
_FILE_LIKE = re.compile(r"(\.[A-Za-z0-9]+|/)$")


def _lines(page: Path) -> Iterator[tuple[int, str]]:
    yield from enumerate(page.read_text(encoding="utf-8").splitlines(), 1)


def _named_paths(page: Path) -> Iterator[tuple[int, str]]:
    """(line, path) of each backticked file or folder path; ``path:function`` gives ``path``,
    a template (``test/passes/<name>.mlir``) nothing."""
    for number, line in _lines(page):
        for match in _CODE.finditer(line):
            path = match.group(1).split(":", 1)[0].rstrip(".,;")
            placeholder = any(c in path for c in "<>{}$")  # python/hector/targets/<name>.py
            if "/" in path and "://" not in path and not placeholder and _FILE_LIKE.search(path):
                yield number, path


def _installed_prefixes() -> dict[str, str]:
    """Installed package folder (``hector/runtime/``) → source folder (``runtime/``)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        packages = tomllib.load(f)["tool"]["scikit-build"]["wheel"]["packages"]
    return {f"{package}/": f"{source}/" for package, source in packages.items()}


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    fenced = False
    for _, line in _lines(page):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


def _where(page: Path, number: int) -> str:
    return f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:{number}"


def missing_paths(pages: list[Path]) -> list[str]:
    """Backticked paths into the repository's folders that name nothing in the tree."""
    missing: list[str] = []
    for page in pages:
        for number, path in _named_paths(page):
            if path.split("/", 1)[0] not in SOURCE_FOLDERS or path in FOREIGN_PATHS:
                continue
            found = any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
            if not found:
                missing.append(f"{_where(page, number)}: {path}")
    return missing


def installed_paths(pages: list[Path]) -> list[str]:
    """Backticked paths written as installed (``hector/runtime/x.py``), with their source path."""
    # Longest prefix first: hector/runtime/ before hector/.
    prefixes = sorted(_installed_prefixes().items(), key=lambda item: -len(item[0]))
    installed: list[str] = []
    for page in pages:
        for number, path in _named_paths(page):
            for package, source in prefixes:
                if path.startswith(package):
                    fix = source + path[len(package) :]
                    installed.append(f"{_where(page, number)}: {path} (write {fix})")
                    break
    return installed


def broken_links(pages: list[Path]) -> list[str]:
    """Relative Markdown links to a missing file, or to a heading their page does not have."""
    broken: list[str] = []
    for page in pages:
        for number, line in _lines(page):
            for match in _LINK.finditer(line):
                target = match.group(1)
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                linked = (page.parent / path).resolve() if path else page
                where = f"{_where(page, number)}: {target}"
                if not linked.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                    broken.append(f"{where} (no such heading)")
    return broken


def test_paths_the_docs_name_exist_in_the_tree() -> None:
    missing = missing_paths(PAGES)
    assert not missing, "docs name paths that are not in the tree:\n" + "\n".join(missing)


def test_docs_name_source_paths_not_installed_ones() -> None:
    installed = installed_paths(PAGES)
    assert not installed, "docs name installed paths:\n" + "\n".join(installed)


def test_relative_links_reach_a_file_and_a_heading() -> None:
    broken = broken_links(PAGES)
    assert not broken, "broken links in the docs:\n" + "\n".join(broken)


def test_the_checks_find_each_kind_of_error(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A heading\n"
        "See `runtime/no_such_module.py`, `runtime/bundle.py:load`, `test/lowering/*.nothing`,\n"
        "`hector/runtime/bundle.py`, `test/nn/conv/test_rgcn_conv.py`, `~/.cache/x.py` and\n"
        "`test/passes/<name>.mlir`.\n"
        "Links: [ok](#a-heading), [gone](#no-heading), [file](missing.md), [web](https://x.org).\n",
        encoding="utf-8",
    )
    assert [m.split(": ", 1)[1] for m in missing_paths([page])] == [
        "runtime/no_such_module.py",
        "test/lowering/*.nothing",
    ]
    assert [m.split(": ", 1)[1] for m in installed_paths([page])] == [
        "hector/runtime/bundle.py (write runtime/bundle.py)"
    ]
    assert [m.split(": ", 1)[1] for m in broken_links([page])] == [
        "#no-heading (no such heading)",
        "missing.md (no such file)",
    ]
