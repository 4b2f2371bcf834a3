"""Generate the dialect reference pages: ``python -m hector.dialects.docs [OUT_DIR]``.

Writes ``<OUT_DIR>/<dialect>.md`` (default ``docs/dialects``) from the op specs, so the docs
cannot drift from the definitions; a test compares the committed pages with fresh output.
"""

from __future__ import annotations

import os
import sys

from . import DIALECTS


def render() -> dict[str, str]:
    """Reference page text for each dialect, by file name."""
    return {f"{d.name}.md": d.to_markdown() for d in DIALECTS}


def main(argv: list[str] | None = None) -> int:
    """Write the pages; print what was written."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0].startswith("-"):  # --help, or a mistyped option: not a folder
        print(__doc__.splitlines()[0])
        return 0 if argv[0] in ("-h", "--help") else 2
    out_dir = argv[0] if argv else os.path.join("docs", "dialects")
    os.makedirs(out_dir, exist_ok=True)
    for name, text in render().items():
        path = os.path.join(out_dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
