"""Replaying one case of an API strategy alone: ``python3 -m hector_fuzz.replay_api CASE.json``
(the command a campaign writes next to each such finding, and the one the worker pool replays
a crashed or hung API case with)."""

from __future__ import annotations

import json
import sys

from hector_fuzz.api import ApiStrategy
from hector_fuzz.cases import Case
from hector_fuzz.strategies import STRATEGIES

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Replay one API case (a JSON file of :class:`~hector_fuzz.cases.Case`'s fields) alone;
    its exit status as in a worker, its detail on stderr."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python3 -m hector_fuzz.replay_api CASE.json\n")
        return 2
    with open(args[0], encoding="utf-8") as f:
        case = Case.from_json(json.load(f))
    strategy = STRATEGIES.get(case.strategy)
    if not isinstance(strategy, ApiStrategy):
        sys.stderr.write(f"hector_fuzz.replay_api: {case.strategy!r} is not an API strategy\n")
        return 2
    rc, detail = strategy.execute(case)
    sys.stderr.write(detail + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
