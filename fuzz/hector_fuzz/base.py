"""The base of the fuzzer's case-generation strategies: :class:`Strategy` and the
:class:`Environment` it draws on.

Each strategy module (:mod:`~hector_fuzz.mutation`, :mod:`~hector_fuzz.grammar`,
:mod:`~hector_fuzz.extremes`, :mod:`~hector_fuzz.pass_options`,
:mod:`~hector_fuzz.diagnostics`) subclasses :class:`Strategy`; the registry
(:mod:`hector_fuzz.strategies`) lists them.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from hector_fuzz.cases import Case, Seed

__all__ = ["Environment", "Strategy"]


@dataclass(frozen=True)
class Environment:
    """What strategies draw on: the seed corpus, and the campaign seed (``mutation`` keeps the
    historical stream, seeded by it directly)."""

    seeds: Sequence[Seed]
    seed: int

    @property
    def valid_plain(self) -> list[Seed]:
        """Seeds from the tests of valid, Hector-context input."""
        return [
            s
            for s in self.seeds
            if not s.torch and "invalid" not in s.origin and "Inputs" not in s.origin
        ]


class Strategy(abc.ABC):
    """A generator of cases; :data:`hector_fuzz.strategies.STRATEGIES` holds one of each."""

    #: The name ``--strategies`` selects it by.
    name: ClassVar[str]
    #: Its share of ``--cases`` relative to the other selected strategies.
    weight: ClassVar[int] = 1
    #: The suffix of a finding's input file (a case's ``text``).
    input_suffix: ClassVar[str] = ".mlir"

    def run(self, case: Case, workdir: str) -> tuple[int, str] | None:
        """(exit status, stderr) of ``case`` run in this process by the strategy itself, for a
        strategy whose cases are not ``hector-opt`` runs (0: accepted, 1: a clean error, 2 or an
        "internal error" line: a finding); None (the default): a ``hector-opt`` run.
        ``workdir`` is a scratch folder the case may use."""
        return None

    def replay_argv(self, case: Case, path: str) -> list[str] | None:
        """The command that replays ``case`` alone from its input file ``path`` (its ``text``
        written there), for a strategy that runs its own cases; None: ``hector-opt``."""
        return None

    @abc.abstractmethod
    def cases(self, rng: random.Random, count: int, env: Environment) -> Iterator[Case]:
        """``count`` cases drawn from ``rng`` (their ids are renumbered by the campaign)."""
