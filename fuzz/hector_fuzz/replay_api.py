"""Replaying one case of an API strategy alone:
``python3 -m hector_fuzz.replay_api STRATEGY CASE.json`` (the command a campaign writes next to
each such finding, and the one the worker pool replays a crashed or hung API case with;
``CASE.json`` holds the case's parameters, its ``text``)."""

from __future__ import annotations

import sys

from hector_fuzz.api import ApiStrategy
from hector_fuzz.cases import Case
from hector_fuzz.strategies import STRATEGIES

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Replay one API case alone; its exit status as in a worker, its detail on stderr."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.stderr.write("usage: python3 -m hector_fuzz.replay_api STRATEGY CASE.json\n")
        return 2
    name, path = args
    strategy = STRATEGIES.get(name)
    if not isinstance(strategy, ApiStrategy):
        sys.stderr.write(f"hector_fuzz.replay_api: {name!r} is not an API strategy\n")
        return 2
    with open(path, encoding="utf-8") as f:
        case = Case(0, path, f.read(), strategy=name)
    rc, detail = strategy.execute(case)
    sys.stderr.write(detail + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
