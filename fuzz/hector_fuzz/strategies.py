"""The registry of the fuzzer's case-generation strategies, and how a campaign shares its
cases among them.

:data:`STRATEGIES` lists one instance of each strategy by name (``--strategies``), in the order
campaigns interleave them. Each makes :class:`~hector_fuzz.cases.Case` objects from its own
random stream (:func:`strategy_rng`), so a strategy's cases depend only on the campaign seed and
its own count, never on which other strategies run:

``mutation``
    The lit tests' inputs, mutated (:mod:`hector_fuzz.mutation`).
``grammar``
    Whole modules generated from the dialects' op specs (well- and ill-typed) and from a
    grammar of builtin attributes and types (:mod:`hector_fuzz.grammar`).
``extremes``
    Depth and size extremes: deep nesting, huge dims and literals, long names, many ops, odd
    resource blobs (:mod:`hector_fuzz.extremes`).
``pass-options``
    Pipelines mixing Hector and upstream passes with random options, and deeply nested
    pipelines (:mod:`hector_fuzz.pass_options`).
``diagnostics``
    ``--verify-diagnostics`` runs with random ``expected-error(-re)`` comments, invalid and
    catastrophically backtracking regexes among them (:mod:`hector_fuzz.diagnostics`).
``loaders``
    File sets for the dataset and feature loaders (``.npy`` headers, ``torch.save`` archives,
    triple-file encodings, IGBH folder names and links, labels and ids out of range), run and
    judged in the worker against NumPy's and PyTorch's reading of the same files
    (:mod:`hector_fuzz.loaders`).
``differential``
    Random graph-API programs under ``@hector.compile`` against a float64 eager reference,
    forward and gradients, two settings of the optimization switches per case
    (:mod:`hector_fuzz.differential`, programs from :mod:`hector_fuzz.programs`).
``shapes``
    One argument's shape, rank, dtype or layout, or the graph, changed between two calls of
    one compiled function (:mod:`hector_fuzz.shapes`).
``tamper``
    The compilation cache's entries tampered with (FIFOs, links, deep JSON, garbage), its
    file system failing (read-only, full), killed stores' leftovers and the off switch's
    spellings (:mod:`hector_fuzz.tamper`).

The last four run their cases in the worker process through the base class's ``run`` hook
(``differential``, ``shapes`` and ``tamper`` through :class:`~hector_fuzz.api.ApiStrategy`) and
are named with ``--strategies``: ``scripts/fuzz.sh``'s default is the five IR strategies.

A new strategy subclasses :class:`~hector_fuzz.base.Strategy` in a module of its own (importing
only :mod:`hector_fuzz.base`, :mod:`hector_fuzz.cases` and generators such as
:mod:`hector_fuzz.grammar`) and is added to :data:`STRATEGIES` here.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence

from hector_fuzz.base import Environment, Strategy
from hector_fuzz.cases import Case
from hector_fuzz.diagnostics import DiagnosticsStrategy
from hector_fuzz.differential import DifferentialStrategy
from hector_fuzz.extremes import ExtremesStrategy
from hector_fuzz.grammar import GrammarStrategy
from hector_fuzz.loaders import LoaderStrategy
from hector_fuzz.mutation import MutationStrategy
from hector_fuzz.pass_options import PassOptionsStrategy
from hector_fuzz.shapes import ShapesStrategy
from hector_fuzz.tamper import TamperStrategy

__all__ = ["STRATEGIES", "Environment", "Strategy", "interleave", "plan", "strategy_rng"]

#: Every strategy by name, in the order campaigns interleave them.
STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        MutationStrategy(),
        GrammarStrategy(),
        ExtremesStrategy(),
        PassOptionsStrategy(),
        DiagnosticsStrategy(),
        LoaderStrategy(),
        DifferentialStrategy(),
        ShapesStrategy(),
        TamperStrategy(),
    )
}


def plan(names: Sequence[str], cases: int) -> dict[str, int]:
    """``cases`` split across the strategies ``names`` by weight (largest remainders first),
    in registry order."""
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        known = ", ".join(STRATEGIES)
        raise ValueError(f"unknown strategy {', '.join(unknown)} (known: {known})")
    chosen = [n for n in STRATEGIES if n in names]
    weights = {n: STRATEGIES[n].weight for n in chosen}
    total = sum(weights.values())
    exact = {n: cases * w / total for n, w in weights.items()}
    counts = {n: int(v) for n, v in exact.items()}
    rest = cases - sum(counts.values())
    for n in sorted(chosen, key=lambda n: counts[n] - exact[n])[:rest]:
        counts[n] += 1
    return counts


def interleave(streams: dict[str, tuple[int, Iterator[Case]]]) -> Iterator[Case]:
    """Merge each strategy's ``(count, cases)`` evenly (a campaign cut short has seen every
    strategy), renumbering ids from 0 and tagging each case with its strategy."""
    order = sorted(
        ((k + 0.5) / count, rank, name)
        for rank, (name, (count, _)) in enumerate(streams.items())
        for k in range(count)
    )
    for new_id, (_, _, name) in enumerate(order):
        case = next(streams[name][1])
        yield dataclasses.replace(case, id=new_id, strategy=name)


def strategy_rng(seed: int, name: str) -> random.Random:
    """The random stream of strategy ``name`` in the campaign seeded ``seed``."""
    # The stream name predates the package's move; kept so that a seed reproduces a campaign.
    return random.Random(f"hector.fuzz/{seed}/{name}")
