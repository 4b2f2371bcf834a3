"""``hector bench pyg-tests``: PyG's own unit tests for its relational layers, each conv call
also run under ``torch.compile(backend=HectorBackend())``.

PyG's test files are the peer's, not ours: fetch them (``test/nn/conv/test_rgcn_conv.py``,
``test_rgat_conv.py``, ``test_hgt_conv.py`` of the PyG release installed) into a folder and
pass it as ``--tests``. The files run under pytest in this process. Every call of an
``RGCNConv``, ``FastRGCNConv``, ``RGATConv`` or ``HGTConv`` runs as the test wrote it (eager;
its result goes back to the test, so the test passes or fails on PyG's own behaviour) and then
once more compiled, from the same random-number state (so dropout draws the same mask), with
Dynamo's caches reset first (each call is a first compilation). For each compiled call the
record holds whether Hector's program ran (its ``hector::pyg_layer`` calls counted in
``hector.dynamo.pyg_route.STATS``), the reason the layer ran PyG's own forward instead
(``pyg_route.FALLBACKS``), an error the compiled call raised where the eager one did not (and
whether the traceback passes through Hector), and outputs that differ from eager's
(``allclose``, ``atol=rtol=1e-4``, NaN equal to NaN: PyG leaves some parameters
uninitialised).

    hector bench pyg-tests --tests /path/to/pyg/test/nn/conv --json bench-results/pyg.json
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import _common

LAYERS = ("RGCNConv", "FastRGCNConv", "RGATConv", "HGTConv")
FILES = ("test_rgcn_conv.py", "test_rgat_conv.py", "test_hgt_conv.py")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``hector bench pyg-tests``."""
    p.add_argument("--tests", required=True, help="folder holding PyG's conv test files")
    p.add_argument("-k", dest="keyword", default="", help="pytest -k expression (a subset)")
    p.add_argument("--json", default=None, help="write the record here")


@dataclass
class LayerCounts:
    """What the compiled calls of one layer class did."""

    calls: int = 0
    hector: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)
    errors: list[dict[str, Any]] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


class CompiledTwin:
    """The pytest plugin: wraps the layers' ``__call__`` so each call also runs compiled."""

    def __init__(self) -> None:
        self.layers = {name: LayerCounts() for name in LAYERS}
        self.test = ""
        self.outcomes: Counter[str] = Counter()

    def pytest_sessionstart(self, session: Any) -> None:
        """Route and wrap the layers before any test module imports them."""
        import torch_geometric.nn as pyg_nn

        from hector.dynamo import backend as dynamo  # noqa: F401  (installs the routes)

        for name in LAYERS:
            cls = getattr(pyg_nn, name)
            cls.__call__ = self._wrap(name)

    def pytest_runtest_setup(self, item: Any) -> None:
        """Remember which test makes the next calls."""
        self.test = item.nodeid

    def pytest_runtest_logreport(self, report: Any) -> None:
        """Count PyG's own test outcomes (the eager results are what the tests see)."""
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.outcome] += 1

    def _wrap(self, name: str) -> Any:
        import torch

        def call(conv: Any, *args: Any, **kwargs: Any) -> Any:
            state = torch.get_rng_state()
            eager = torch.nn.Module.__call__(conv, *args, **kwargs)
            after = torch.get_rng_state()
            torch.set_rng_state(state)
            try:
                self._compiled(name, conv, eager, args, kwargs)
            finally:
                torch.set_rng_state(after)
            return eager

        return call

    def _compiled(self, name: str, conv: Any, eager: Any, args: Any, kwargs: Any) -> None:
        import torch

        from hector.dynamo import backend as dynamo
        from hector.dynamo import pyg_route

        counts = self.layers[name]
        counts.calls += 1
        torch._dynamo.reset()
        pyg_route.FALLBACKS.clear()
        before = sum(s.calls for s in pyg_route.STATS.values())
        try:
            # the module's own __call__ (the class's is this wrapper, which Dynamo must not see)
            module_call = functools.partial(torch.nn.Module.__call__, conv)
            out = torch.compile(module_call, backend=dynamo.HectorBackend())(*args, **kwargs)
        except Exception as err:  # recorded: an error of the compiled call only
            tb = traceback.extract_tb(err.__traceback__)
            counts.errors.append(
                {
                    "test": self.test,
                    "error": f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:300]}",
                    "through_hector": any("/hector/" in f.filename for f in tb),
                    "without_hector": _dynamo_alone(conv, args, kwargs),
                }
            )
            return
        if sum(s.calls for s in pyg_route.STATS.values()) > before:
            counts.hector += 1
        else:
            counts.fallbacks[pyg_route.FALLBACKS.get(name, "no Hector program ran")] += 1
        if not _same(out, eager):
            counts.wrong.append(self.test)


def _dynamo_alone(conv: Any, args: Any, kwargs: Any) -> str:
    """What the same call does under ``backend="eager"`` (Dynamo without Hector): ``"ok"``,
    or its error (then the error is Dynamo's, not Hector's)."""
    import torch

    torch._dynamo.reset()
    try:
        torch.compile(functools.partial(torch.nn.Module.__call__, conv), backend="eager")(
            *args, **kwargs
        )
    except Exception as err:  # recorded, as the compiled call's own error
        return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"
    return "ok"


def _same(a: Any, b: Any) -> bool:
    """Nested outputs equal (tensors: ``|a - b| <= 1e-4 + 1e-4 * max|b|``, the error float32
    reassociation makes in proportion to the values summed; NaN equal to NaN), or equal."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.layout != torch.strided or b.layout != torch.strided:
            a, b = a.to_dense(), b.to_dense()
        if a.shape != b.shape:
            return False
        if not torch.equal(a.isnan(), b.isnan()):
            return False
        a, b = a[~b.isnan()], b[~b.isnan()]
        inf = a.isinf() | b.isinf()
        if not torch.equal(a[inf], b[inf]):
            return False
        scale = b[~inf].abs().max().item() if (~inf).any() else 0.0
        return bool(((a - b)[~inf].abs() <= 1e-4 + 1e-4 * scale).all())
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if hasattr(a, "to_dense") and hasattr(b, "to_dense"):  # torch_sparse.SparseTensor
        return _same(a.to_dense(), b.to_dense())
    return bool(a == b)


def _summary(twin: CompiledTwin) -> dict[str, Any]:
    layers = {}
    for name, c in twin.layers.items():
        layers[name] = {**asdict(c), "fallbacks": dict(c.fallbacks)}
    calls = sum(c.calls for c in twin.layers.values())
    hector = sum(c.hector for c in twin.layers.values())
    return {
        "layers": layers,
        "calls": calls,
        "hector_calls": hector,
        "hector_share": hector / calls if calls else None,
        "errors": sum(len(c.errors) for c in twin.layers.values()),
        "errors_caused_by_hector": sum(
            e["without_hector"] == "ok" for c in twin.layers.values() for e in c.errors
        ),
        "wrong": sum(len(c.wrong) for c in twin.layers.values()),
        "pyg_test_outcomes": dict(twin.outcomes),
    }


def _print(summary: dict[str, Any]) -> None:
    print(f"{'layer':<14}{'calls':>7}{'hector':>8}{'errors':>8}{'wrong':>7}")
    for name, c in summary["layers"].items():
        print(f"{name:<14}{c['calls']:>7}{c['hector']:>8}{len(c['errors']):>8}{len(c['wrong']):>7}")
        for reason, n in sorted(c["fallbacks"].items(), key=lambda kv: -kv[1]):
            print(f"    {n:>4} x PyG's forward: {reason}")
        for e in c["errors"]:
            alone = "" if e["without_hector"] == "ok" else " (Dynamo alone fails the same way)"
            print(f"    error in {e['test']}: {e['error']}{alone}")
    share = summary["hector_share"]
    print(
        f"Hector's program ran for {summary['hector_calls']} of {summary['calls']} conv calls"
        + (f" ({share:.1%})" if share is not None else "")
    )


def run(args: argparse.Namespace) -> int:
    """Run PyG's test files with every conv call twinned; print and write the record."""
    import pytest

    folder = Path(args.tests)
    files = [str(folder / f) for f in FILES if (folder / f).is_file()]
    if not files:
        print(f"error: none of {', '.join(FILES)} is in {folder}", file=sys.stderr)
        return 2
    twin = CompiledTwin()
    start = time.perf_counter()
    opts = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", *files]
    code = pytest.main([*opts, "-k", args.keyword] if args.keyword else opts, plugins=[twin])
    summary = _summary(twin)
    summary["seconds"] = time.perf_counter() - start
    summary["pytest_exit_code"] = int(code)
    _print(summary)
    if args.json:
        record = {"benchmark": "pyg-tests", "files": files, "host": _common.host_info(), **summary}
        _common.write_json(args.json, record)
    return 0
