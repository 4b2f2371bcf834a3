"""``torch.compile(model, backend="hector")``: Hector as a TorchDynamo backend.

Dynamo captures the model's Python into FX graphs (breaking the graph where it cannot trace:
``.item()``, data-dependent control flow) and hands each graph to :class:`HectorBackend`. The
backend takes each one through the same code path as :func:`hector.import_model`
(:func:`hector.frontends.importer.import_function`: ``torch.export`` + torch-mlir's FX importer to
the torch dialect, ``raise-torch-to-hector``, Hector's compiler for the raised regions and
torch-mlir's linalg path, or PyTorch, for the rest); only how the graph's index inputs are bound
differs: the backend finds them itself.

* **Graph bindings.** A captured graph's placeholders are classified once, when Dynamo compiles
  it: one integer ``[2, E]`` input is the ``edge_index``, a 1-D integer input of length ``E``
  (preferably named ``*type*``) the edge types, the floating-point inputs that are not
  parameters give the node count. At each call the :class:`~hector.data.graph.HeteroGraph` is built
  from those tensors, or found in a small cache keyed by their *content*
  (:class:`hector.frontends.graph_cache.IndexCache`: each entry keeps a private copy of the tensors
  it was built from and is hit only when the current ones are exactly equal to it, so writes
  through NumPy views or ``.data``, which keep the pointer and version counter, are seen).
* **Dynamic shapes.** With ``dynamic=True`` (or ``torch._dynamo.mark_dynamic``, or Dynamo's
  automatic dynamic after a second size) node and edge counts are symbolic and Dynamo compiles
  the graph once. The backend then *specialises* per concrete size (the importer's torch
  segments are statically shaped); the compiled Hector regions have dynamic rows and are shared
  between sizes (``import_plan._REGION_CACHE``). :meth:`HectorBackend.stats` counts both:
  ``compilations`` (graphs Dynamo handed over) and ``specializations`` (imports).
* **Training.** The backend receives forward graphs (no AOTAutograd). The raised regions run as
  ``TrainingStep`` autograd functions whose backward Hector derives with ``hector-autodiff`` on
  the relational IR (the backward of a ``gather_src`` is a ``sum_to_src``, which Hector fuses
  and compacts); linalg segments run their compiled vjp. AOTAutograd's joint graph would instead
  hand over the backward already decomposed into ATen scatter/index_put/sum patterns that the
  raise pass would have to recognise a second time, in a form the user never wrote.
* **Fallbacks, never silent.** A graph without graph inputs, with several ``edge_index`` inputs
  (per-relation dicts), or one the importer refuses runs as Dynamo captured it: eagerly
  (``fallback="eager"``, the default) or compiled by Inductor (``fallback="inductor"``). Each
  new specialisation is checked against the captured graph run eagerly once (``verify=True``,
  default) and falls back if it differs. :func:`explain` and the ``hector.dynamo.backend`` logger
  say what was raised, what fell back and why.

Options (``torch.compile(m, backend="hector", options={...})`` or
``HectorBackend(**options)``): ``unraised`` (``"linalg"`` | ``"eager"``: how ops left unraised
inside an imported graph run), ``fallback`` (``"eager"`` | ``"inductor"``), ``strict`` (raise
instead of falling back), ``verify`` (bool), ``rtol``/``atol`` (the verification's tolerance).

``memory_budget`` (a fraction of the keep-all step's modelled memory, or bytes; None by
default) takes every graph the other way, for models that are not GNNs: AOTAutograd with
Hector's partitioner, each saved value kept or offloaded so the step's modelled memory fits
the budget, Inductor compiling the compute (``offload.joint.JointBackend``; ``compute``:
``"inductor"`` | ``"eager"``; ``offload_threshold``: bytes under which a saved value is kept;
``optimizer``: stepped per parameter in the backward). ``HectorBackend.joint``: the plans.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from ..data.graph import HeteroGraph
from ..frontends.graph_cache import graph_builds, graph_for
from . import (
    pyg_bases,  # noqa: F401  (registers to_hetero_with_bases' HeteroBasisConv route)
    pyg_hetero_call,  # noqa: F401  (registers HeteroConv's route with pyg_route)
    pyg_passes,
    pyg_route,
    pyg_to_hetero,  # noqa: F401  (routes to_hetero models' layers to pyg_hetero's programs)
)

if TYPE_CHECKING:
    from ..frontends.importer import ImportedModel

log = logging.getLogger("hector.dynamo.backend")


def _importer() -> ModuleType:
    """:mod:`hector.frontends.importer` (torch-mlir's FX importer and the GNN compiler stack),
    imported on first need: a ``memory_budget`` compile never needs it."""
    from ..frontends import importer

    return importer


_OPTIONS: dict[str, Any] = {
    "unraised": "linalg",
    "fallback": "eager",
    "strict": False,
    "verify": True,
    "rtol": 1e-4,
    "atol": 1e-4,
    "modules": True,
    "memory_budget": None,
    "compute": "inductor",
    "offload_threshold": 64 << 10,
    "optimizer": None,
}
#: The options a budgeted compile's backend is made from, beside the optimizer.
_JOINT_OPTIONS = ("memory_budget", "compute", "offload_threshold")


class BackendError(RuntimeError):
    """A captured graph cannot run through Hector and ``strict=True`` forbids falling back."""


@dataclass
class Binding:
    """Which positional inputs of a captured graph are the graph's arrays."""

    edge_index: int | None = None
    src: int | None = None
    dst: int | None = None
    edge_type: int | None = None
    node_inputs: list[int] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # role -> placeholder name


@dataclass
class Specialization:
    """One import of a captured graph, for one set of input shapes."""

    key: tuple[Any, ...]
    imported: ImportedModel | None = None
    reason: str | None = None
    seconds: float = 0.0


@dataclass
class CapturedGraph:
    """A graph Dynamo handed to the backend, and how it runs: the callable Dynamo calls."""

    index: int
    gm: torch.fx.GraphModule
    options: dict[str, Any]
    placeholders: list[str]
    n_outputs: int
    binding: Binding | None = None
    reason: str | None = None  # why the whole graph falls back (None: it goes to Hector)
    layers: list[str] = field(default_factory=list)  # Hector layer programs the graph calls
    fallback_kind: str = "eager"
    fallback_fn: Any = None
    specializations: dict[tuple[Any, ...], Specialization] = field(default_factory=dict)
    calls: int = 0
    hector_calls: int = 0
    fallback_calls: int = 0
    hector_seconds: float = 0.0

    # -- what people read ---------------------------------------------------------------------
    @property
    def status(self) -> str:
        """``"hector"`` when some specialisation runs through Hector (or the graph calls a
        recognised layer's Hector program), else ``"fallback"``."""
        if self.layers:
            return "hector"
        if self.reason is None and any(
            s.imported is not None for s in self.specializations.values()
        ):
            return "hector"
        return "fallback" if self.reason is not None or self.specializations else "pending"

    def raised(self) -> dict[str, int]:
        """The hector_inter ops raised (from the latest successful specialisation)."""
        imp = self._latest()
        return dict(imp.report.raised) if imp is not None else {}

    def unraised(self) -> list[tuple[str, str]]:
        """The torch ops left unraised, with their ``file:line``."""
        imp = self._latest()
        return list(imp.report.unsupported) if imp is not None else []

    def segments(self) -> list[str]:
        """How each unraised torch segment runs (``linalg``, ``view``, ``eager``)."""
        imp = self._latest()
        return [s.kind for s in imp.torch_segments] if imp is not None else []

    def _latest(self) -> ImportedModel | None:
        for s in reversed(list(self.specializations.values())):
            if s.imported is not None:
                return s.imported
        return None

    def describe(self, code: bool = True) -> str:
        """A human-readable account of this graph: bindings, what was raised, what fell back."""
        lines = [f"graph {self.index}: {len(self.gm.graph.nodes)} FX nodes, {self.calls} call(s)"]
        if self.binding is not None:
            bound = ", ".join(f"{r}={n}" for r, n in self.binding.names.items())
            lines.append(f"  graph inputs: {bound}")
        if self.reason is not None:
            lines.append(f"  fell back ({self.fallback_kind}): {self.reason}")
            declined = describe_layers(pyg_layers(self.gm))
            if declined:
                lines.append(f"  declined layer(s), run as captured: {declined}")
        if self.layers:
            lines.append(
                f"  recognised PyG layer(s), run by Hector's compiled program(s) "
                f"{self.layers} (hector::pyg_layer); the rest of the graph runs as captured"
            )
        for s in self.specializations.values():
            shapes = _describe_key(s.key)
            if s.imported is None:
                lines.append(f"  [{shapes}] fell back ({self.fallback_kind}): {s.reason}")
            else:
                lines.append(f"  [{shapes}] Hector, imported in {s.seconds:.2f} s")
        if self._latest() is not None:
            lines.append(f"  raised: {self.raised()}")
            unraised: dict[str, list[str]] = {}
            for name, where in self.unraised():
                unraised.setdefault(name, []).append(self.user_line(where))
            for name, wheres in unraised.items():
                lines.append(f"  not raised: {name} at {', '.join(sorted(set(wheres))[:3])}")
            kinds = self.segments()
            if kinds:
                lines.append(f"  unraised ops run as torch segments: {kinds}")
        if code:
            lines.append("  captured code:")
            lines.extend("    " + ln for ln in self.gm.code.strip().splitlines())
        return "\n".join(lines)

    def user_line(self, where: str) -> str:
        """``where`` (a ``file:line`` of the captured graph's generated code) as the user's
        ``file:line`` that produced it (the FX node's stack trace), when known."""
        m = re.fullmatch(r"<eval_with_key>\.\d+:(\d+)", where)
        lines = self.gm.code.splitlines()
        if m is None or not 0 < int(m.group(1)) <= len(lines):
            return where
        target = lines[int(m.group(1)) - 1].strip().split(" = ", 1)[0]
        node = next((n for n in self.gm.graph.nodes if n.name == target), None)
        trace = node.meta.get("stack_trace") if node is not None else None
        frames = re.findall(r'File "([^"]+)", line (\d+)', trace or "")
        if not frames:
            return where
        path, line = frames[-1]
        return f"{path.rsplit('/', 1)[-1]}:{line}"

    # -- running ------------------------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        """Run the graph: through Hector when it can, else as captured (eager or Inductor)."""
        self.calls += 1
        if self.layers:
            # The layer's op runs Hector's program; around it, weight-sized glue (PyTorch).
            self.hector_calls += 1
            return self.gm.forward(*args)
        if self.reason is not None:
            return self._fallback(args)
        try:
            graph, order = self._graph(args)
        except (ValueError, _importer().ImportError_) as err:
            return self._refuse(args, f"graph inputs do not form a graph: {err}")
        key = _shape_key(args) + (graph.num_nodes, graph.num_etypes)
        spec = self.specializations.get(key)
        if spec is None:
            spec = self._specialize(key, args, graph, order)
            if spec.imported is None and self.status == "fallback":
                # The first import failed (a graph Dynamo gave with symbolic sizes, imported at
                # its first call): the graph is declined, as one refused at compile time is,
                # so later sizes run as captured instead of importing and failing again.
                self.reason = spec.reason
        if spec.imported is None:
            return self._fallback(args)
        self.hector_calls += 1
        spec.imported.rebind(graph, order)
        out = spec.imported(*[a for a in args if _passed(a)])
        return self._as_outputs(out)

    def _as_outputs(self, out: Any) -> tuple[Any, ...]:
        if self.n_outputs == 1:
            return (out,)
        return tuple(out)

    def _refuse(self, args: Any, reason: str) -> Any:
        if self.options["strict"]:
            raise BackendError(f"graph {self.index}: {reason}")
        log.info("graph %d falls back: %s", self.index, reason)
        key = ("refused", reason)
        self.specializations.setdefault(key, Specialization(key, reason=reason))
        return self._fallback(args)

    def _fallback(self, args: Any) -> Any:
        self.fallback_calls += 1
        fn = self.fallback_fn if self.fallback_fn is not None else self.gm.forward
        return fn(*args)

    def _graph(self, args: Any) -> tuple[HeteroGraph, str]:
        b = self.binding
        assert b is not None
        if b.edge_index is not None:
            ei = args[b.edge_index]
        else:
            assert b.src is not None
            assert b.dst is not None
            ei = torch.stack([args[b.src], args[b.dst]])
        et = args[b.edge_type] if b.edge_type is not None else None
        rows = {int(args[i].shape[0]) for i in b.node_inputs}
        if len(rows) != 1:
            raise _importer().ImportError_(f"node inputs have different row counts {sorted(rows)}")
        return graph_for(ei, et, rows.pop())

    def _specialize(
        self, key: tuple[Any, ...], args: Any, graph: HeteroGraph, order: str
    ) -> Specialization:
        """Import the graph for these shapes (once), check it against the captured graph."""
        spec = Specialization(key)
        self.specializations[key] = spec
        start = time.perf_counter()
        try:
            spec.imported = self._import(args, graph, order)
        except Exception as err:  # any failure: the graph runs as captured, and says why
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            spec.reason = f"{type(err).__name__}: {first}"
            log.debug("graph %d: the import failed", self.index, exc_info=True)
        spec.seconds = time.perf_counter() - start
        if spec.imported is not None and not spec.imported.segments:
            spec.reason, spec.imported = "nothing was raised (no relational pattern)", None
        if spec.imported is not None and not relational(spec.imported.report.raised):
            # Only dense ops (linear layers, elementwise) were raised: PyTorch runs those as
            # fast, and the captured graph needs no import per size.
            ops = ", ".join(sorted(spec.imported.report.raised))
            spec.reason, spec.imported = f"no relational op raised (only {ops})", None
        if spec.imported is not None and self.options["verify"]:
            spec.reason = self._verify(spec.imported, args)
            if spec.reason is not None:
                spec.imported = None
        if spec.imported is None:
            if self.options["strict"]:
                raise BackendError(f"graph {self.index}: {spec.reason}")
            log.info("graph %d falls back for %s: %s", self.index, key[:-2], spec.reason)
        else:
            log.info(
                "graph %d runs through Hector for %s: raised %s, %d unraised op(s)",
                self.index,
                key[:-2],
                dict(spec.imported.report.raised),
                len(spec.imported.report.unsupported),
            )
        return spec

    def _import(self, args: Any, graph: HeteroGraph, order: str) -> ImportedModel:
        b = self.binding
        assert b is not None
        tensor_pos = [i for i, a in enumerate(args) if _passed(a)]
        roles: dict[int, str] = {}
        for role, pos in (
            ("edge_index", b.edge_index),
            ("src", b.src),
            ("dst", b.dst),
            ("etype", b.edge_type),
        ):
            if pos is not None:
                roles[tensor_pos.index(pos)] = role
        function = _Positional(self.gm, list(args))
        imported = _importer().import_function(
            function,
            [args[i] for i in tensor_pos],
            roles,
            graph,
            order,
            strict=False,
            fallback=self.options["unraised"],
        )
        for seg in imported.segments:
            seg.entry = _Timed(seg.entry, self)
        return imported

    def _verify(self, imported: ImportedModel, args: Any) -> str | None:
        """None when the import computes what the captured graph does on ``args``."""
        with torch.no_grad():
            want = self.gm.forward(*args)
            imported.rebind(*self._graph(args))
            got = self._as_outputs(imported(*[a for a in args if _passed(a)]))
        if len(got) != len(want):
            return f"the import returns {len(got)} value(s), the graph {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if not isinstance(w, torch.Tensor):
                continue
            if not isinstance(g, torch.Tensor) or g.shape != w.shape:
                return f"output {i} has shape {getattr(g, 'shape', None)}, not {tuple(w.shape)}"
            if w.is_floating_point():
                ok = torch.allclose(
                    g.to(w.dtype), w, rtol=self.options["rtol"], atol=self.options["atol"]
                )
                if not ok:
                    err = (g.to(w.dtype) - w).abs().max().item()
                    return f"output {i} differs from the captured graph by {err:.3g}"
            elif not torch.equal(g.to(w.dtype), w):
                return f"output {i} differs from the captured graph"
        return None


class _Positional(torch.nn.Module):
    """A captured graph as a function of its tensor inputs (its int inputs fixed)."""

    def __init__(self, gm: torch.fx.GraphModule, template: list[Any]) -> None:
        super().__init__()
        self.gm = gm
        self.template = [None if _passed(a) else a for a in template]

    def forward(self, *tensors: Any) -> Any:
        it = iter(tensors)
        full = [next(it) if a is None else a for a in self.template]
        return self.gm(*full)


class _Timed:
    """A compiled region whose calls (forward, training, backward) add to a clock."""

    def __init__(self, entry: Any, clock: CapturedGraph) -> None:
        self._entry = entry
        self._clock = clock

    def call(self, fname: str, g: HeteroGraph, tensors: list[torch.Tensor]) -> Any:
        """Run ``fname`` of the compiled region, timing it."""
        start = time.perf_counter()
        try:
            return self._entry.call(fname, g, tensors)
        finally:
            self._clock.hector_seconds += time.perf_counter() - start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._entry, name)


#: Name parts of the hector_inter ops that read the graph (gathers, sums over edges, softmax
#: and maximum over incoming edges, degree norms, compact rows).
_RELATIONAL_OPS = ("gather", "sum_to", "sum_dst", "sum_compact", "degree_norm", "edge_", "compact")


def relational(raised: dict[str, int]) -> bool:
    """Whether raised ops (``{op name: count}``) include one that reads the graph."""
    return any(part in name for name in raised for part in _RELATIONAL_OPS)


def pyg_layers(gm: torch.fx.GraphModule) -> dict[str, list[str]]:
    """The PyG layers a captured graph traced through (``HeteroConv``, ``MessagePassing``
    convs, the user's own included): ``{class name: [module paths]}``, from the FX nodes'
    ``nn_module_stack``, in the order the graph first uses them."""
    import sys

    conv = sys.modules.get("torch_geometric.nn.conv")
    bases = tuple(
        c for c in (getattr(conv, "MessagePassing", None), getattr(conv, "HeteroConv", None)) if c
    )
    found: dict[str, list[str]] = {}
    for node in gm.graph.nodes:
        for path, cls in (node.meta.get("nn_module_stack") or {}).values():
            if not (bases and isinstance(cls, type) and issubclass(cls, bases)):
                continue
            paths = found.setdefault(cls.__name__, [])
            path = re.sub(r"^L\['self'\]\.?", "", str(path)) or "(the model)"
            if path not in paths:
                paths.append(path)
    return found


def describe_layers(layers: dict[str, list[str]], shown: int = 3) -> str:
    """``pyg_layers``' result for people: each class with its count and first paths."""
    parts = []
    for name, paths in layers.items():
        more = f", ... {len(paths) - shown} more" if len(paths) > shown else ""
        count = f" x{len(paths)}" if len(paths) > 1 else ""
        parts.append(f"{name}{count} ({', '.join(paths[:shown])}{more})")
    return "; ".join(parts)


def _concrete(v: Any) -> Any:
    if isinstance(v, torch.SymInt):
        return int(v.node.hint)
    return v


def _describe_key(key: tuple[Any, ...]) -> str:
    """A specialisation key for people: tensor shapes, fixed scalars, ints."""
    if key and key[0] == "refused":
        return "any shape"
    parts = []
    for k in key[:-2]:
        if isinstance(k, tuple) and k and k[0] == "value":
            parts.append(f"={k[1]:g}")
        elif isinstance(k, tuple):
            parts.append(str(list(k[0])))
        else:
            parts.append(str(k))
    return ", ".join(parts)


def _passed(a: Any) -> bool:
    """Whether a captured graph's input is passed to the import (a tensor), not fixed in it.

    A 0-d tensor that needs no gradient is a Python number Dynamo did not specialise (with
    ``dynamic=True`` float attributes such as a slope arrive as tensors read by ``.item()``);
    the import fixes its value (it is part of the specialisation key), so that the raise pass
    sees a constant.
    """
    return isinstance(a, torch.Tensor) and (a.dim() > 0 or a.requires_grad)


def _shape_key(args: Any) -> tuple[Any, ...]:
    def one(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return (tuple(a.shape), a.dtype) if _passed(a) else ("value", a.item())
        return _concrete(a)

    return tuple(one(a) for a in args)


_PARAM_MARKS = ("_parameters_", "_buffers_")


def mutated_inputs(gm: torch.fx.GraphModule) -> list[str]:
    """Placeholders the captured graph writes to in place (``x.add_(...)``, ``x[i] = v``)."""
    import operator

    out = []
    for n in gm.graph.nodes:
        target = n.target
        name = target if isinstance(target, str) else getattr(target, "__name__", "")
        inplace = name.endswith("_") and not name.startswith("__")
        inplace = inplace or target in (operator.setitem, operator.iadd, operator.imul)
        if n.op in ("call_method", "call_function") and inplace and n.args:
            first = n.args[0]
            if isinstance(first, torch.fx.Node) and first.op == "placeholder":
                out.append(first.name)
    return sorted(set(out))


def find_binding(
    gm: torch.fx.GraphModule, example_inputs: list[Any]
) -> tuple[Binding | None, str | None]:
    """Classify a captured graph's inputs: the binding, or None and why there is none."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    edge_indices, ints, nodes_ = [], [], []
    for i, (name, ex) in enumerate(zip(names, example_inputs, strict=False)):
        if not isinstance(ex, torch.Tensor):
            continue
        low = name.lower()
        if ex.dtype in (torch.int64, torch.int32):
            if ex.dim() == 2 and ex.shape[0] == 2:
                edge_indices.append(i)
            elif ex.dim() == 1:
                ints.append(i)
        elif ex.is_floating_point() and ex.dim() >= 1:
            if isinstance(ex, torch.nn.Parameter) or any(m in low for m in _PARAM_MARKS):
                continue
            nodes_.append(i)
    b = Binding()
    if len(edge_indices) > 1:
        return None, (
            f"{len(edge_indices)} edge_index inputs "
            f"({', '.join(names[i] for i in edge_indices[:3])}"
            f"{', ...' if len(edge_indices) > 3 else ''}): per-relation edge_index dicts over "
            "bipartite node sets; the raise pass binds one graph (one node id space) per function"
        )
    if edge_indices:
        b.edge_index = edge_indices[0]
        num_edges = int(example_inputs[b.edge_index].shape[1])
        b.names["edge_index"] = names[b.edge_index]
    else:
        srcs = [i for i in ints if any(w in names[i].lower() for w in ("src", "source"))]
        dsts = [i for i in ints if any(w in names[i].lower() for w in ("dst", "target"))]
        if len(srcs) != 1 or len(dsts) != 1:
            return None, "no edge_index (integer [2, E]) input: nothing to bind the graph to"
        b.src, b.dst = srcs[0], dsts[0]
        num_edges = int(example_inputs[b.src].shape[0])
        b.names.update(src=names[b.src], dst=names[b.dst])
    edge_wise = [
        i for i in ints if int(example_inputs[i].shape[0]) == num_edges and i not in (b.src, b.dst)
    ]
    typed = [i for i in edge_wise if "type" in names[i].lower()]
    if len(typed) == 1 or (not typed and len(edge_wise) == 1):
        b.edge_type = (typed or edge_wise)[0]
        b.names["edge_type"] = names[b.edge_type]
    b.node_inputs = [i for i in nodes_ if int(example_inputs[i].shape[0]) != num_edges]
    if not b.node_inputs:
        return None, "no node-feature input (a floating-point tensor that is not a parameter)"
    rows = {int(example_inputs[i].shape[0]) for i in b.node_inputs}
    if len(rows) > 1:
        return None, f"node inputs with different row counts {sorted(rows)} (bipartite)"
    b.names["nodes"] = ", ".join(names[i] for i in b.node_inputs)
    return b, None


class HectorBackend:
    """The Dynamo backend: ``torch.compile(model, backend=HectorBackend(...))``; the instance
    registered as ``"hector"`` is :data:`backend`. Keeps every captured graph it was handed
    (:attr:`graphs`) for :func:`explain` and :meth:`stats`."""

    def __init__(self, **options: Any) -> None:
        """Options as in the module docstring; unknown names are an error."""
        self.options = _checked({**_OPTIONS, **options})
        self.graphs: list[CapturedGraph] = []
        #: The joint-graph backend the ``memory_budget`` option compiles with (its plans).
        self.joint: Any = None
        self._joint_key: tuple[Any, ...] = ()
        # A memory_budget compile counts the process's growth from here (the compile's).
        self._resident: int | None = None
        if self.options["memory_budget"] is not None:
            from ..offload.memory_timeline import resident_bytes

            self._resident = resident_bytes()
        # The recognised PyG layers call Hector's op when this backend compiles them (PyG not
        # imported yet: routed as soon as ``torch_geometric.nn`` is, see pyg_route.install).
        pyg_route.install()

    #: Marks the backend for ``pyg_route`` (which finds it behind Dynamo's wrappers).
    backend_name = "hector"

    def __call__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: list[Any],
        options: dict[str, Any] | None = None,
    ) -> Any:
        """Compile one captured graph: return the callable Dynamo runs in its place."""
        opts = _checked({**self.options, **(options or {})})
        if opts["memory_budget"] is not None:
            return self._joint(opts)(gm, example_inputs)
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        outs = out_node.args[0]
        n_outputs = len(outs) if isinstance(outs, tuple | list) else 1
        cg = CapturedGraph(
            len(self.graphs),
            gm,
            opts,
            [n.name for n in gm.graph.nodes if n.op == "placeholder"],
            n_outputs,
            fallback_kind=opts["fallback"],
        )
        self.graphs.append(cg)
        pyg_route.install()  # a no-op once routed (PyG is routed when it is imported)
        cg.layers = pyg_route.program_names(gm)
        if cg.layers:
            log.info("graph %d calls Hector layer program(s) %s", cg.index, cg.layers)
            pyg_passes.rewrite(gm)  # rows as stored, unread relations left out, direct calls
            return cg
        cg.binding, cg.reason = find_binding(gm, example_inputs)
        mutated = mutated_inputs(gm)
        if cg.reason is None and mutated:
            # Verifying a specialisation runs the graph twice: an input it writes to would be
            # written twice. Such graphs run as captured.
            cg.reason = f"the graph writes to its input(s) {', '.join(mutated)} in place"
        if cg.reason is None and not isinstance(outs, tuple | list):
            cg.reason = "the graph does not return a tuple"
        # Importing inside Dynamo's compilation works on real example inputs with static
        # shapes; with symbolic sizes (SymInt inputs) torch.export trips over the outer
        # tracing context, so those graphs are imported at their first call instead.
        deferred = any(
            type(e).__name__ == "FakeTensor" or isinstance(e, torch.SymInt) for e in example_inputs
        )
        if cg.reason is None and not deferred:
            # Import now, on Dynamo's example inputs (real tensors): a graph the importer
            # refuses is known before the first run, so Inductor can compile it in its place.
            args = [_concrete(e) for e in example_inputs]
            try:
                graph, order = cg._graph(args)
            except (ValueError, _importer().ImportError_) as err:
                cg.reason = f"graph inputs do not form a graph: {err}"
            else:
                key = _shape_key(args) + (graph.num_nodes, graph.num_etypes)
                spec = cg._specialize(key, args, graph, order)
                if spec.imported is None:
                    cg.reason = spec.reason
        if cg.reason is not None:
            if opts["strict"]:
                raise BackendError(f"graph {cg.index}: {cg.reason}")
            log.info("graph %d falls back (%s): %s", cg.index, opts["fallback"], cg.reason)
            if opts["fallback"] == "inductor":
                from torch._inductor.compile_fx import compile_fx

                cg.fallback_fn = compile_fx(gm, example_inputs)
        return cg

    def _joint(self, opts: dict[str, Any]) -> Any:
        """The :class:`~hector.offload.joint.JointBackend` of ``opts`` (kept while they hold)."""
        from ..offload.joint import JointBackend

        key = (*map(opts.get, _JOINT_OPTIONS), id(opts["optimizer"]))
        if self.joint is None or self._joint_key != key:
            self.joint = JointBackend(
                opts["memory_budget"],
                compute=opts["compute"],
                threshold=opts["offload_threshold"],
                since=self._resident,
                optimizer=opts["optimizer"],
            )
            self._joint_key = key
        return self.joint

    def stats(self) -> dict[str, Any]:
        """Counts for a benchmark record: captured graphs (Dynamo compilations), Hector
        specialisations, graphs that fell back, calls, and seconds inside Hector regions."""
        specs = [s for g in self.graphs for s in g.specializations.values()]
        names = {name for g in self.graphs for name in g.layers}
        layers = {n: p for n, p in pyg_route.STATS.items() if n in names}
        return {
            "compilations": len(self.graphs),
            "graphs_through_hector": sum(g.status == "hector" for g in self.graphs),
            "graphs_fallen_back": sum(g.status == "fallback" for g in self.graphs),
            "specializations": sum(s.imported is not None for s in specs),
            "failed_specializations": sum(s.imported is None for s in specs),
            "hector_calls": sum(g.hector_calls for g in self.graphs),
            "fallback_calls": sum(g.fallback_calls for g in self.graphs),
            "hector_seconds": sum(g.hector_seconds for g in self.graphs)
            + sum(p.seconds for p in layers.values()),
            "graph_builds": graph_builds() + sum(p.graph_builds for p in layers.values()),
            "layer_programs": {
                name: {
                    "calls": p.calls,
                    "backward_calls": p.backward_calls,
                    "seconds": round(p.seconds, 4),
                    "kernels": len(p.kernels),
                }
                for name, p in layers.items()
            },
            "layer_fallbacks": dict(pyg_route.FALLBACKS),
            "declined": [
                {"graph": g.index, "layers": pyg_layers(g.gm), "reason": g.reason}
                for g in self.graphs
                if g.status == "fallback"
            ],
        }

    def reset_clock(self) -> None:
        """Zero the time spent in Hector regions (before a timed run)."""
        for g in self.graphs:
            g.hector_seconds = 0.0
        for g in self.graphs:
            for name in g.layers:
                pyg_route.STATS[name].seconds = 0.0


def _checked(options: dict[str, Any]) -> dict[str, Any]:
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise ValueError(
            f"unknown hector backend option(s) {sorted(unknown)}; known: {sorted(_OPTIONS)}"
        )
    if options["unraised"] not in ("linalg", "eager"):
        raise ValueError(f"unraised must be 'linalg' or 'eager', got {options['unraised']!r}")
    if options["fallback"] not in ("eager", "inductor"):
        raise ValueError(f"fallback must be 'eager' or 'inductor', got {options['fallback']!r}")
    return options


@dataclass
class Explanation:
    """What :func:`explain` found: the captured graphs, Dynamo's graph breaks, the output."""

    graphs: list[CapturedGraph]
    graph_breaks: dict[str, int]
    output: Any
    stats: dict[str, Any]

    def __str__(self) -> str:
        """Each captured graph (bindings, raised, unraised, fallbacks), then the breaks."""
        parts = [g.describe() for g in self.graphs]
        for layer, reason in self.stats.get("layer_fallbacks", {}).items():
            parts.append(f"recognised layer {layer} ran PyG's own forward: {reason}")
        if self.graph_breaks:
            parts.append("graph breaks (Dynamo):")
            parts.extend(f"  {n} x {reason}" for reason, n in self.graph_breaks.items())
        else:
            parts.append("no graph breaks")
        return "\n".join(parts)


def explain(model: Any, *inputs: Any, **options: Any) -> Explanation:
    """Compile ``model`` with a fresh Hector backend, run it once on ``inputs`` and return
    every captured graph with what was raised, what fell back and why (print it).

    Resets Dynamo's caches first (``torch._dynamo.reset()``), so graphs compiled earlier in
    the process are compiled again.
    """
    import torch._dynamo
    from torch._dynamo.utils import counters

    chosen = HectorBackend(**options)
    torch._dynamo.reset()
    pyg_route.FALLBACKS.clear()
    before = dict(counters["graph_break"])
    out = torch.compile(model, backend=chosen)(*inputs)
    after = dict(counters["graph_break"])
    breaks = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
    return Explanation(list(chosen.graphs), breaks, out, chosen.stats())


#: The backend registered with Dynamo as ``"hector"``.
backend = HectorBackend()


def _register() -> None:
    from torch._dynamo.backends import registry

    # Loaded through the package's `torch_dynamo_backends` entry point, Dynamo registers the
    # backend itself once this import returns: registering here too would be a duplicate.
    if "hector" in registry._COMPILER_FNS or registry._BACKENDS.get("hector") is not None:
        return
    registry.register_backend(compiler_fn=backend, name="hector")


_register()
