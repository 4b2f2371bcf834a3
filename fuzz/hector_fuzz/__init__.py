"""A fuzzer for Hector's IR tools: ``python3 -m hector_fuzz --cases N --strategies LIST``.

Cases come from strategies (:mod:`hector_fuzz.strategies`, a table of generator objects):
``mutation`` (mutated lit-test inputs, :mod:`hector_fuzz.mutation`), ``grammar`` (modules
generated from the dialects' op specs and a builtin attribute/type grammar,
:mod:`hector_fuzz.grammar`), ``extremes`` (depth and size extremes, :mod:`hector_fuzz.extremes`),
``pass-options`` (mixed Hector/upstream pipelines with random options,
:mod:`hector_fuzz.pass_options`), ``diagnostics`` (``--verify-diagnostics`` with random
expected-diagnostic regexes, :mod:`hector_fuzz.diagnostics`) and ``loaders`` (file sets for
the dataset and feature loaders, run and judged in the worker, :mod:`hector_fuzz.loaders`).
``--cases`` is split across them by weight; ``--inputs N --pipelines M`` alone run the mutation
strategy only, as before.

Mutation seeds are the lit tests' inputs (``test/**/*.mlir``, split on ``// -----``, comment
lines dropped; :mod:`hector_fuzz.cases`). Cases run in worker processes that call
``hector.tools.opt.main`` in-process (:mod:`hector_fuzz.runner`); a case that aborts a worker or
hangs is replayed alone through the ``hector-opt`` command to record what it prints.

Every case ends in one :class:`Outcome`: ``accepted`` (exit 0), ``clean_error`` (exit 1 with
diagnostics), ``internal_error`` (a Python traceback, exit 2, an "internal error" diagnostic,
or an accepted case whose output ``hector-opt`` rejects when it reads it back), ``crash`` (the
process died: a signal or exit status >= 128) or ``timeout``. The last three are findings: each
is written to the output folder as the input file plus the command that replays it, and
``summary.json`` holds the counts (:mod:`hector_fuzz.campaign`).

Three strategies run Hector's Python API in the workers instead of ``hector-opt``
(:class:`~hector_fuzz.api.ApiStrategy`): ``differential`` (random graph-API programs against
a float64 eager reference, forward and gradients, optimization switches as metamorphic
relations), ``shapes`` (argument changes between calls of one compiled function) and
``tamper`` (the compilation cache's entries tampered with, its file system failing); they
are selected by name only (``--strategies differential,shapes,tamper``).

Modules, each depending only on those listed before it: ``cases`` (data), ``base`` (the
:class:`~hector_fuzz.base.Strategy` base), ``api`` (the API strategies' base), ``programs``
(random programs and their eager reference), the strategy modules (``mutation``, ``grammar``,
``extremes``, ``pass_options``, ``diagnostics``, ``differential``, ``shapes``, ``tamper``),
``strategies`` (the table), ``replay_api``, ``runner``, ``campaign``, ``cli``.
"""

from __future__ import annotations

from hector_fuzz.campaign import campaign_cases, run_campaign
from hector_fuzz.cases import DEFAULT_CORPUS, Case, Outcome, Result, Seed, Summary, load_seeds
from hector_fuzz.cli import main
from hector_fuzz.mutation import make_cases, mutate, option_variants, pipelines
from hector_fuzz.runner import (
    HECTOR_OPT,
    READ_BACK_FAILED,
    WorkerPool,
    classify,
    replay,
    run_case,
    worker_main,
)

__all__ = [
    "DEFAULT_CORPUS",
    "HECTOR_OPT",
    "READ_BACK_FAILED",
    "Case",
    "Outcome",
    "Result",
    "Seed",
    "Summary",
    "WorkerPool",
    "campaign_cases",
    "classify",
    "load_seeds",
    "main",
    "make_cases",
    "mutate",
    "option_variants",
    "pipelines",
    "replay",
    "run_campaign",
    "run_case",
    "worker_main",
]
