"""Strategies whose cases run Hector's Python API in the worker, not ``hector-opt``:
:class:`ApiStrategy`, and the command that replays one such case alone
(``python3 -m hector_fuzz.replay_api STRATEGY CASE.json``, :mod:`hector_fuzz.replay_api`).

An API case's ``text`` is a JSON object of the parameters its strategy draws (a program's seed,
shapes, a tampering); :meth:`ApiStrategy.execute` rebuilds the case from it and checks Hector's
behaviour, answering ``(exit status, detail)`` as a ``hector-opt`` run would: 0 when the case
was accepted and checked out, 1 when Hector refused it with a clear error, 2 with
:data:`INTERNAL` in the detail for a finding (an unexpected exception, a silent wrong result).
A crash or a hang is caught by the worker pool as for any case.
"""

from __future__ import annotations

import abc
import json
import sys
import traceback
from typing import Any, ClassVar

from hector_fuzz.base import Strategy
from hector_fuzz.cases import Case

__all__ = ["INTERNAL", "ApiStrategy", "Finding"]

#: The prefix of every finding's detail (``runner.classify`` reads "internal error").
INTERNAL = "hector_fuzz: internal error"


class Finding(AssertionError):
    """A case's check failed: a silent wrong result, or Hector accepted what it must refuse."""


class ApiStrategy(Strategy):
    """A strategy whose cases call Hector's API in the worker process (through the base
    class's :meth:`~hector_fuzz.base.Strategy.run` and ``replay_argv`` hooks)."""

    #: A finding's input file holds the case's parameters as JSON.
    input_suffix: ClassVar[str] = ".json"

    def run(self, case: Case, workdir: str) -> tuple[int, str]:
        """:meth:`execute` in the worker's process (``workdir`` is not needed)."""
        return self.execute(case)

    def replay_argv(self, case: Case, path: str) -> list[str]:
        """``python3 -m hector_fuzz.replay_api <strategy> <path>``."""
        return [sys.executable, "-m", "hector_fuzz.replay_api", self.name, path]

    @abc.abstractmethod
    def check(self, params: dict[str, Any]) -> bool:
        """Run the case of ``params``: True when accepted and right, False for a clear error
        Hector raised; raises :class:`Finding` (or anything unexpected) for a defect."""

    def execute(self, case: Case) -> tuple[int, str]:
        """(exit status, detail) of ``case``, as :func:`hector_fuzz.runner.classify` reads
        them: 0 accepted, 1 a clean error, 2 a finding."""
        try:
            accepted = self.check(json.loads(case.text))
        except Finding as err:
            return 2, f"{INTERNAL}: {err}"
        except Exception:  # noqa: BLE001  (anything unexpected is what the fuzzer looks for)
            return 2, f"{INTERNAL}: unexpected exception\n{traceback.format_exc()}"
        return (0, "") if accepted else (1, "a clean error")

    def make_case(self, number: int, origin: str, params: dict[str, Any]) -> Case:
        """A case of this strategy (its id is renumbered by the campaign)."""
        return Case(number, origin, json.dumps(params, sort_keys=True), strategy=self.name)
