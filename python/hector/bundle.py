"""Ahead-of-time bundles: everything a compiled model needs to run on a GPU without the compiler.

:func:`build` compiles a function (or a Hector layer) for target ``bundle``
(:mod:`hector.targets.bundle`: the ``cuda`` kernels for one GPU architecture) and writes a
directory holding

* ``kernels.ptx`` — the PTX of every kernel (the one ``gpu.binary`` of the module), and
* ``plan.json`` — a versioned launch plan (``"version": 1``) read off the host functions that
  ``convert-hector-intra-to-gpu`` produced: for each function (the forward, and for training
  ``<f>_train`` and ``<f>_backward``) its arguments, its temporaries with their shapes, and the
  ordered steps (``alloc``, ``memset``, ``copy``, ``launch``, ``free``), every size a small
  expression over the arguments' dimensions (see :data:`BINARY_OPS`).

:func:`load` returns a callable with the signature of the compiled function, run by the
pure-Python executor :mod:`hector.runtime.bundle` (PyTorch tensors and stream, the CUDA
driver through ``cuda-bindings``); loading imports neither MLIR nor torch-mlir.

The plan is derived by walking each host function's ops (:func:`plan_function`); an op the
expression language cannot say is refused with :class:`BundleError` naming it and its location,
so a bundle never silently differs from the compiled path. The compiler is imported on first
use: loading a bundle needs none. :func:`write` validates the plan as
the loader does (:func:`hector.runtime.bundle.validate_plan`) before writing it. See
docs/bundles.md.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .runtime.bundle import BundleFunction
from .runtime.bundle import load as _load_bundle
from .runtime.bundle_plan import PLAN_FILE, PTX_FILE, BundleError, parse_plan, validate_plan
from .runtime.launch import ptx_param_counts

if TYPE_CHECKING:
    import torch

    from .data.graph import HeteroGraph
    from .program import Traced
    from .targets.options import Options

__all__ = [
    "BundleError",
    "build",
    "build_program",
    "load",
    "plan_function",
    "plan_module",
    "write",
]


def load(path: str | os.PathLike[str]) -> BundleFunction:
    """Load the bundle in directory ``path``: a callable ``fn(g, *tensors)`` with the signature
    of the compiled function (differentiable when the bundle was built for training). Imports
    neither MLIR nor torch-mlir."""
    return _load_bundle(path)


def plan_function(func: Any) -> dict[str, Any]:
    """The launch plan of one host function (see :func:`hector.targets.bundle.plan_function`);
    :class:`BundleError` at the first op the plan cannot express."""
    from .targets.bundle import plan_function as plan

    return plan(func)


def plan_module(module: Any) -> dict[str, dict[str, Any]]:
    """The plan of every host function of a module after the GPU stages, by name."""
    from .targets.bundle import plan_module as plan

    return plan(module)


# ---------------------------------------------------------------------------------------------
# Building and writing
# ---------------------------------------------------------------------------------------------


def _check_written(plan: dict[str, Any], ptx: str) -> None:
    """Refuse to write a plan the loader would refuse (a bug of the plan's derivation)."""
    try:
        text = json.dumps(plan).encode("utf-8")
        validate_plan(parse_plan(text), ptx_param_counts(ptx))
    except (BundleError, TypeError, ValueError) as err:
        raise BundleError(f"the plan built is not a valid version-1 plan: {err}") from None


def write(out: str | os.PathLike[str], plan: dict[str, Any], ptx: str) -> str:
    """Write ``plan.json`` and ``kernels.ptx`` into directory ``out`` atomically (a temporary
    directory beside it renamed into place): a failed write leaves no partial bundle. The plan
    is validated as :func:`load` validates it first, so a bundle written always loads."""
    target = os.path.abspath(os.fspath(out))
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(target) and not os.path.isfile(os.path.join(target, PLAN_FILE)):
        if os.listdir(target):
            raise BundleError(f"'{target}' exists and is not a bundle; refusing to overwrite it")
    _check_written(plan, ptx)
    tmp = tempfile.mkdtemp(prefix=".bundle-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 is for the name race, not the bundle
        with open(os.path.join(tmp, PTX_FILE), "w", encoding="utf-8") as f:
            f.write(ptx)
        with open(os.path.join(tmp, PLAN_FILE), "w", encoding="utf-8") as f:
            json.dump(plan, f, indent=1)
            f.write("\n")
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def build_program(
    program: Traced | str | Any,
    *,
    out: str | os.PathLike[str],
    chip: str = "sm_90",
    training: bool = True,
    options: Options | None = None,
) -> str:
    """Build a bundle from a traced program, hector_inter text or a module (``hector compile
    --target cuda --bundle``); without a graph, the optimizations decide as for unknown graph
    statistics. Returns the bundle's path."""
    from .targets.bundle import BUNDLE

    code = BUNDLE.compile(program, autodiff=training, options=options, chip=chip)
    return write(out, code.plan, code.ptx)


def _capture(model: Any, graph: HeteroGraph, inputs: Sequence[Any]) -> tuple[Any, tuple]:
    """The compiled core of a Hector layer and the tensors its forward passes to it (the
    forward runs once with the core replaced by a recorder returning zeros)."""
    import torch

    from .frontends.compiled import CompiledFunction
    from .frontends.trace import trace

    core: CompiledFunction = model.compiled
    seen: list[tuple] = []

    class _Recorder:
        def __call__(self, g: Any, *tensors: torch.Tensor) -> Any:
            seen.append(tensors)
            traced = trace(core.fn, [tuple(t.shape) for t in tensors])
            outs = [
                torch.zeros(g.num_nodes if k == "node" else g.num_edges, *w)
                for k, w in zip(
                    (str(getattr(k, "value", k)) for k in traced.result_kinds),
                    traced.result_widths,
                    strict=True,
                )
            ]
            return outs[0] if len(outs) == 1 else tuple(outs)

    saved = model._fn
    model._fn = _Recorder()
    try:
        with torch.no_grad():
            model(graph, *inputs)
    finally:
        model._fn = saved
    if len(seen) != 1:
        raise BundleError(f"the layer's forward called its compiled core {len(seen)} times")
    return core, tuple(t.detach() for t in seen[0])


def build(
    fn_or_model: Any,
    graph: HeteroGraph,
    *inputs: Any,
    out: str | os.PathLike[str],
    chip: str = "sm_90",
    training: bool = True,
    target: str = "cuda",
) -> str:
    """Build a bundle for ``fn_or_model`` on graphs like ``graph`` and write it to ``out``.

    ``fn_or_model`` is a function ``f(g, *tensors)`` written against the graph API, a
    ``hector.compile``-d one, or a Hector layer (``RGCNLayer``, ``RGATLayer``,
    ``HGTLayer``: anything with a ``compiled`` core); ``inputs`` are example tensors (for a layer,
    its forward's inputs); a tuple of ints stands for a tensor of that shape. The kernels are
    compiled for GPU architecture ``chip``; with
    ``training`` the bundle also holds ``<f>_train`` and ``<f>_backward``. The optimizations
    decided from the graph's statistics (compaction, HGT's folding) are those
    ``hector.compile`` makes for ``graph``. Returns the bundle's path."""
    from .frontends.compiled import CompiledFunction
    from .frontends.trace import trace
    from .lowering.pipelines import check_gpu_chip
    from .targets.bundle import BUNDLE

    if target != "cuda":
        raise BundleError(f"bundles are built for target 'cuda', got {target!r}")
    try:
        check_gpu_chip(chip)
    except ValueError as err:
        raise BundleError(str(err)) from None
    import torch

    # Shapes stand for example tensors (zeros: only shapes reach the bundle).
    inputs = tuple(torch.zeros(tuple(x)) if isinstance(x, tuple | list) else x for x in inputs)
    if hasattr(fn_or_model, "compiled") and callable(fn_or_model):
        core, tensors = _capture(fn_or_model, graph, inputs)
    else:
        core = fn_or_model if isinstance(fn_or_model, CompiledFunction) else None
        core = core or CompiledFunction(fn_or_model)
        tensors = tuple(inputs)
    core.check_arguments(graph, tensors)
    traced = trace(core.fn, [tuple(t.shape) for t in tensors])
    code = BUNDLE.compile(traced, autodiff=training, options=core.options_for(graph), chip=chip)
    return write(out, code.plan, code.ptx)
