"""``hector bench pyg-tests``: PyG's own unit tests for its relational layers and heterogeneous
models, each model call also run under ``torch.compile(backend=HectorBackend())``.

PyG's test files are the peer's, not ours: fetch them (``test/nn/conv/test_rgcn_conv.py``,
``test_rgat_conv.py``, ``test_hgt_conv.py``, ``test_hetero_conv.py``, and
``test/nn/test_to_hetero_transformer.py``, ``test_to_hetero_with_bases_transformer.py``,
``test_to_hetero_module.py`` of the PyG release installed) into one or more folders and pass
them as ``--tests``. The files run under pytest in this process. Every call of a twinned model
(:data:`LAYERS`, :data:`MODELS`, and the ``GraphModule`` that ``to_hetero`` or
``to_hetero_with_bases`` returns) runs as the test wrote it (eager; its result goes back to the
test, so the test passes or fails on PyG's own behaviour) and then once more compiled, from the
same random-number state (so dropout draws the same mask), with Dynamo's caches reset first
(each call is a first compilation). Only the outermost twinned call is twinned (a conv inside a
twinned model runs as the model's part). For each compiled call the record holds whether
Dynamo handed the backend a graph (``reached``), whether Hector's program ran (its
``hector::pyg_layer`` calls counted in ``hector.dynamo.pyg_route.STATS``, or a captured graph
run through Hector), the reason the model ran PyG's own forward instead
(``pyg_route.FALLBACKS``, else the backend's reason for declining its graphs), an error the
compiled call raised where the eager one did not (and whether the traceback passes through
Hector), and outputs that differ from eager's (``allclose``, ``atol=rtol=1e-4``, NaN equal to
NaN: PyG leaves some parameters uninitialised). Counts are kept per model, per test file and
per kind of model (:func:`model_kind`: all its message passing layers of classes Hector's
programs express, one of another class, or none at all), so the share of calls that ran
Hector's program is given over the models whose convs Hector supports as well as over all.

    hector bench pyg-tests --tests /path/to/pyg/test/nn/conv /path/to/pyg/test/nn --json pyg.json
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import _common

#: The relational layers Hector routes by class (``torch_geometric.nn``).
LAYERS = ("RGCNConv", "FastRGCNConv", "RGATConv", "HGTConv")
#: Heterogeneous model classes twinned as well: ``HeteroConv`` (``torch_geometric.nn``), and
#: ``to_hetero_module``'s modules.
MODELS = {
    "HeteroConv": "torch_geometric.nn",
    "ToHeteroLinear": "torch_geometric.nn.to_hetero_module",
    "ToHeteroMessagePassing": "torch_geometric.nn.to_hetero_module",
}
#: The transformers whose ``GraphModule`` is twinned, by the label its calls are counted under.
TRANSFORMS = {
    "to_hetero": ("torch_geometric.nn.to_hetero_transformer", "ToHeteroTransformer"),
    "to_hetero_with_bases": (
        "torch_geometric.nn.to_hetero_with_bases_transformer",
        "ToHeteroWithBasesTransformer",
    ),
}
#: The kinds of model a call is counted under as well: whether its message passing layers are
#: all of a class Hector's programs express (:func:`model_kind`).
KINDS = {
    "supported": "models whose convs Hector supports",
    "other_convs": "models with a conv Hector does not express",
    "no_message_passing": "models without message passing",
}
FILES = (
    "test_rgcn_conv.py",
    "test_rgat_conv.py",
    "test_hgt_conv.py",
    "test_hetero_conv.py",
    "test_to_hetero_transformer.py",
    "test_to_hetero_with_bases_transformer.py",
    "test_to_hetero_module.py",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``hector bench pyg-tests``."""
    p.add_argument("--tests", required=True, nargs="+", help="folder(s) holding PyG's test files")
    p.add_argument("-k", dest="keyword", default="", help="pytest -k expression (a subset)")
    p.add_argument("--json", default=None, help="write the record here")


@dataclass
class LayerCounts:
    """What the compiled calls of one model class (or of one test file) did. ``hector``: calls
    that ran Hector's program: a routed layer's (``layer_program``) or a captured graph imported
    whole (``imported``); ``partial``: of those, calls where some layer still ran PyG's forward
    (its reason in ``fallbacks``); ``wrong``: outputs that differ from eager's, each with what
    Dynamo alone gives (``without_hector``: ``"ok"`` when only Hector's differs)."""

    calls: int = 0
    reached: int = 0
    hector: int = 0
    layer_program: int = 0
    imported: int = 0
    partial: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)
    errors: list[dict[str, Any]] = field(default_factory=list)
    wrong: list[dict[str, Any]] = field(default_factory=list)


def model_kind(module: Any) -> str:
    """The :data:`KINDS` key of ``module``: ``"supported"`` when it holds convs (message
    passing layers, ``torch_geometric.nn.MessagePassing``, and whatever a ``HeteroConv`` holds
    per relation) and every one is PyG's own class of :data:`LAYERS` or of the ``HeteroConv``
    route's (:data:`hector.dynamo.pyg_hetero.RELATIONS`); ``"other_convs"`` when one is not;
    ``"no_message_passing"`` when it holds none."""
    from torch_geometric.nn import HeteroConv, MessagePassing

    from hector.dynamo import pyg_hetero

    convs = [m for m in module.modules() if isinstance(m, MessagePassing)]
    for m in module.modules():
        convs += list(m.convs.values()) if isinstance(m, HeteroConv) else []
    if not convs:
        return "no_message_passing"
    known = {*LAYERS, *pyg_hetero.RELATIONS}
    ours = all(
        type(c).__name__ in known and type(c).__module__.startswith("torch_geometric.")
        for c in convs
    )
    return "supported" if ours else "other_convs"


class CompiledTwin:
    """The pytest plugin: wraps the models' ``__call__`` so each call also runs compiled."""

    def __init__(self) -> None:
        self.layers = {name: LayerCounts() for name in (*LAYERS, *MODELS, *TRANSFORMS)}
        self.files: dict[str, LayerCounts] = {}
        self.kinds = {kind: LayerCounts() for kind in KINDS}
        self.test = ""
        self.outcomes: Counter[str] = Counter()
        self._inside = False  # a twinned call is running (its parts are not twinned again)
        self._patched: list[tuple[type, str, Any]] = []
        self.log: list[dict[str, Any]] = []  # one entry per twinned call

    def pytest_sessionstart(self, session: Any) -> None:
        """Route and wrap the models before any test module imports them."""
        import importlib

        import torch_geometric.nn as pyg_nn

        from hector.dynamo import backend as dynamo  # noqa: F401  (installs the routes)

        for name in LAYERS:
            self._patch(getattr(pyg_nn, name), "__call__", functools.partial(self._wrap, name))
        for name, module in MODELS.items():
            cls = getattr(importlib.import_module(module), name)
            self._patch(cls, "__call__", functools.partial(self._wrap, name))
        for label, (module, name) in TRANSFORMS.items():
            cls = getattr(importlib.import_module(module), name)
            self._patch(cls, "transform", functools.partial(self._wrap_transform, label))

    def pytest_sessionfinish(self, session: Any) -> None:
        """Put the classes back as they were (the bench may run inside another process)."""
        for cls, attr, own in reversed(self._patched):
            if own is None:
                delattr(cls, attr)
            else:
                setattr(cls, attr, own)
        self._patched.clear()

    def _patch(self, cls: type, attr: str, wrap: Callable[[Any], Any]) -> None:
        """Replace ``cls.attr`` by ``wrap`` of it, remembering what the class itself held."""
        self._patched.append((cls, attr, vars(cls).get(attr)))
        setattr(cls, attr, wrap(getattr(cls, attr)))

    def pytest_runtest_setup(self, item: Any) -> None:
        """Remember which test makes the next calls."""
        self.test = item.nodeid

    def pytest_runtest_logreport(self, report: Any) -> None:
        """Count PyG's own test outcomes (the eager results are what the tests see)."""
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.outcome] += 1

    def _wrap_transform(self, label: str, transform: Callable[..., Any]) -> Any:
        """``transform`` whose ``GraphModule`` (a class of its own, as every ``GraphModule``)
        has its calls twinned under ``label``."""

        def wrapped(transformer: Any) -> Any:
            module = transform(transformer)
            cls = type(module)
            cls.__call__ = self._wrap(label, cls.__call__)
            return module

        return wrapped

    def _wrap(self, name: str, original: Callable[..., Any]) -> Any:
        import torch

        def call(conv: Any, *args: Any, **kwargs: Any) -> Any:
            if self._inside or torch.compiler.is_compiling():
                return original(conv, *args, **kwargs)
            self._inside = True
            try:
                state = torch.get_rng_state()
                eager = original(conv, *args, **kwargs)
                after = torch.get_rng_state()
                torch.set_rng_state(state)
                try:
                    call = functools.partial(original, conv)
                    self._compiled(name, model_kind(conv), call, eager, args, kwargs)
                finally:
                    torch.set_rng_state(after)
            finally:
                self._inside = False
            return eager

        return call

    def _counts(self, name: str, kind: str) -> list[LayerCounts]:
        """The counts a call of ``name`` adds to: its model's, its test file's, its kind's."""
        file = Path(self.test.split("::")[0]).name
        return [self.layers[name], self.files.setdefault(file, LayerCounts()), self.kinds[kind]]

    def _compiled(
        self, name: str, kind: str, module_call: Any, eager: Any, args: Any, kwargs: Any
    ) -> None:
        import torch

        from hector.dynamo import backend as dynamo
        from hector.dynamo import pyg_route

        counts = self._counts(name, kind)
        for c in counts:
            c.calls += 1
        state = torch.get_rng_state()
        torch._dynamo.reset()
        pyg_route.FALLBACKS.clear()
        before = sum(s.calls for s in pyg_route.STATS.values())
        backend = dynamo.HectorBackend()  # its graphs: what Dynamo handed it
        alone = functools.partial(_dynamo_alone, module_call, args, kwargs, state)
        try:
            # the module's own __call__ (the class's is this wrapper, which Dynamo must not see)
            out = torch.compile(module_call, backend=backend)(*args, **kwargs)
        except Exception as err:  # recorded: an error of the compiled call only
            tb = traceback.extract_tb(err.__traceback__)
            error = {
                "test": self.test,
                "error": f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:300]}",
                "through_hector": any("/hector/" in f.filename for f in tb),
                "without_hector": alone(),
            }
            for c in counts:
                c.errors.append(error)
            return
        layer = sum(s.calls for s in pyg_route.STATS.values()) > before
        imported = any(g.hector_calls for g in backend.graphs if not g.layers)
        reason = _fallback_reason(name, backend, layer or imported)
        wrong = None if _same(out, eager) else {"test": self.test, "without_hector": alone(eager)}
        for c in counts:
            c.reached += bool(backend.graphs)
            c.hector += layer or imported
            c.layer_program += layer
            c.imported += imported
            c.partial += (layer or imported) and reason is not None
            if reason is not None:
                c.fallbacks[reason] += 1
            if wrong is not None:
                c.wrong.append(wrong)
        self.log.append(
            {
                "test": self.test,
                "model": name,
                "kind": kind,
                "reached": bool(backend.graphs),
                "layer_program": layer,
                "imported": imported,
                "fallback": reason,
                "wrong": wrong is not None,
            }
        )


def _fallback_reason(name: str, backend: Any, ran: bool) -> str | None:
    """Why (part of) a compiled call of ``name`` ran PyG's own forward; None when all of it
    ran Hector's program. A layer's reason (``pyg_route.FALLBACKS``) first, then the reason
    the backend declined a graph, then none reaching it."""
    from hector.dynamo import pyg_route

    if set(pyg_route.FALLBACKS) == {name}:
        return pyg_route.FALLBACKS[name]
    if pyg_route.FALLBACKS:
        return "; ".join(f"{k}: {v}" for k, v in sorted(pyg_route.FALLBACKS.items()))
    if ran:
        return None
    declined = [g.reason for g in backend.graphs if g.status == "fallback" and g.reason]
    if declined:
        return f"graph declined: {declined[0][:200]}"
    if not backend.graphs:
        return "Dynamo handed the backend no graph"
    return "no Hector program ran"


def _dynamo_alone(module_call: Any, args: Any, kwargs: Any, rng: Any, eager: Any = None) -> str:
    """What the same call does under ``backend="eager"`` (Dynamo without Hector), from the
    random-number state ``rng``: ``"ok"``, ``"differs from eager"`` (given ``eager``, the eager
    output), or its error (then the error or difference is Dynamo's, not Hector's)."""
    import torch

    torch._dynamo.reset()
    after = torch.get_rng_state()
    torch.set_rng_state(rng)
    try:
        out = torch.compile(module_call, backend="eager")(*args, **kwargs)
    except Exception as err:  # recorded, as the compiled call's own error
        return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"
    finally:
        torch.set_rng_state(after)
    return "ok" if eager is None or _same(out, eager) else "differs from eager"


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


def _totals(counts: dict[str, LayerCounts]) -> dict[str, Any]:
    """Each entry's counts as a record, with totals over them."""
    calls = sum(c.calls for c in counts.values())
    hector = sum(c.hector for c in counts.values())
    return {
        "calls": calls,
        "reached_backend": sum(c.reached for c in counts.values()),
        "hector_calls": hector,
        "layer_program_calls": sum(c.layer_program for c in counts.values()),
        "imported_calls": sum(c.imported for c in counts.values()),
        "partial_calls": sum(c.partial for c in counts.values()),
        "hector_share": hector / calls if calls else None,
        "errors": sum(len(c.errors) for c in counts.values()),
        "errors_caused_by_hector": sum(
            e["without_hector"] == "ok" for c in counts.values() for e in c.errors
        ),
        "wrong": sum(len(c.wrong) for c in counts.values()),
        "wrong_caused_by_hector": sum(
            w["without_hector"] == "ok" for c in counts.values() for w in c.wrong
        ),
    }


def _record(c: LayerCounts) -> dict[str, Any]:
    return {**asdict(c), "fallbacks": dict(c.fallbacks)}


def _summary(twin: CompiledTwin) -> dict[str, Any]:
    return {
        "layers": {name: _record(c) for name, c in twin.layers.items()},
        **_totals(twin.layers),
        "by_file": {
            file: {**_totals({file: c}), "fallbacks": dict(c.fallbacks)}
            for file, c in twin.files.items()
        },
        "by_kind": {
            kind: {**_totals({kind: c}), "fallbacks": dict(c.fallbacks)}
            for kind, c in twin.kinds.items()
        },
        "pyg_test_outcomes": dict(twin.outcomes),
        "calls_log": twin.log,
    }


#: The printed columns: (title, key in a model's record, key in a file's totals).
_COLUMNS = (
    ("calls", "calls", "calls"),
    ("reached", "reached", "reached_backend"),
    ("hector", "hector", "hector_calls"),
    ("layer", "layer_program", "layer_program_calls"),
    ("import", "imported", "imported_calls"),
    ("partial", "partial", "partial_calls"),
    ("errors", "errors", "errors"),
    ("wrong", "wrong", "wrong"),
)


def _row(label: str, values: list[Any]) -> str:
    cells = (len(v) if isinstance(v, list) else v for v in values)
    return f"{label:<40}" + "".join(f"{v:>8}" for v in cells)


def _print(summary: dict[str, Any]) -> None:
    print(_row("model", [title for title, _, _ in _COLUMNS]))
    for name, c in summary["layers"].items():
        if not c["calls"]:
            continue
        print(_row(name, [c[key] for _, key, _ in _COLUMNS]))
        for reason, n in sorted(c["fallbacks"].items(), key=lambda kv: -kv[1]):
            print(f"    {n:>4} x PyG's forward: {reason}")
        for e in c["errors"]:
            alone = "" if e["without_hector"] == "ok" else " (Dynamo alone fails the same way)"
            print(f"    error in {e['test']}: {e['error']}{alone}")
        for w in c["wrong"]:
            alone = {"ok": "", "differs from eager": " (Dynamo alone differs too)"}.get(
                w["without_hector"], f" (Dynamo alone: {w['without_hector']})"
            )
            print(f"    wrong result in {w['test']}{alone}")
    print(_row("file", [title for title, _, _ in _COLUMNS]))
    for file, t in summary["by_file"].items():
        print(_row(file, [t[key] for _, _, key in _COLUMNS]))
    print(_row("kind of model", [title for title, _, _ in _COLUMNS]))
    for kind, t in summary["by_kind"].items():
        print(_row(kind, [t[key] for _, _, key in _COLUMNS]))
    for kind, t in summary["by_kind"].items():
        if t["calls"]:
            print(
                f"{KINDS[kind]}: Hector's program ran for {t['hector_calls']} of {t['calls']}"
                f" calls ({t['hector_share']:.1%}; {t['partial_calls']} of them partial)"
            )
    share = summary["hector_share"]
    print(
        f"Hector's program ran for {summary['hector_calls']} of {summary['calls']} model calls"
        + (f" ({share:.1%})" if share is not None else "")
        + f"; errors caused by Hector: {summary['errors_caused_by_hector']}"
        + f"; wrong results caused by Hector: {summary['wrong_caused_by_hector']}"
    )


def find_test_files(folders: list[str]) -> list[str]:
    """The files of :data:`FILES` in ``folders`` (the first folder holding each)."""
    found = {}
    for folder in map(Path, folders):
        for name in FILES:
            if name not in found and (folder / name).is_file():
                found[name] = str(folder / name)
    return [found[name] for name in FILES if name in found]


def run(args: argparse.Namespace) -> int:
    """Run PyG's test files with every model call twinned; print and write the record."""
    import pytest

    files = find_test_files(args.tests)
    if not files:
        print(f"error: none of {', '.join(FILES)} is in {' '.join(args.tests)}", file=sys.stderr)
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
