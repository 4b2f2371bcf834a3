"""Run an ahead-of-time bundle (``hector.bundle.build``) with PyTorch and the CUDA driver alone.

A bundle is a directory with ``kernels.ptx`` and ``plan.json`` (``"version": 1``; format in
docs/bundles.md). :func:`load` reads it and returns a :class:`BundleFunction`, called like the
compiled function (``fn(g, *tensors)``; differentiable when built for training). Each call walks
the plan of one host function:

* sizes are expressions over the arguments' dimensions (:func:`evaluate`: integers,
  ``["dim", arg, axis]`` and the binary operators of :data:`BINARY_OPS`), computed in Python's
  unbounded integers, so no grid overflows silently; a grid beyond CUDA's limits is an error;
* temporaries are ``torch.empty`` on the tensors' device (PyTorch's caching allocator: no
  ``cudaMalloc``/``cudaFree`` per call); memsets and copies are ``fill_``/``copy_``; kernels run
  on PyTorch's current stream, so the call is ordered like any PyTorch op and never synchronizes;
* a launch whose grid has no block (an empty graph, an edge type without edges) is skipped;
* kernels are launched through :class:`hector.runtime.launch.Launcher` (PTX loaded once per
  architecture, handles resolved once per bundle, parameters packed as ``convert-gpu-to-nvvm``
  expands memrefs).

With a fake driver (an object with :class:`~hector.runtime.launch.Driver`'s methods, as the
tests use) a bundle also runs on CPU tensors: everything happens but the kernels themselves.

This module imports neither MLIR nor torch-mlir, and ``cuda-bindings`` only when a real GPU
launch needs it; nothing from Hector above the runtime layer.
"""

from __future__ import annotations

import array
import ctypes
import json
import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeAlias

import torch

from .launch import (
    Driver,
    Launcher,
    LaunchError,
    MemRef,
    pack_params,
    param_count,
    ptx_param_counts,
)
from .training import TrainingAbi, TrainingStep, rows_of

__all__ = [
    "BINARY_OPS",
    "PLAN_FILE",
    "PLAN_VERSION",
    "PTX_FILE",
    "Bundle",
    "BundleError",
    "BundleFunction",
    "BundleRunner",
    "Expr",
    "evaluate",
    "load",
]

PLAN_FILE = "plan.json"
PTX_FILE = "kernels.ptx"
PLAN_VERSION = 1

#: A size: an integer, ``["dim", arg, axis]`` or ``[op, a, b]`` with ``op`` in BINARY_OPS.
Expr: TypeAlias = int | list[Any]


def _divu(a: int, b: int) -> int:
    if b == 0:
        raise BundleError("a size expression divides by zero")
    return a // b


def _remu(a: int, b: int) -> int:
    if b == 0:
        raise BundleError("a size expression divides by zero")
    return a % b


def _ceildivu(a: int, b: int) -> int:
    return -(-a // b) if b else _divu(a, b)


#: The binary operators of size expressions (unsigned index arithmetic, unbounded here).
BINARY_OPS: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "divu": _divu,
    "remu": _remu,
    "ceildivu": _ceildivu,
    "max": max,
    "min": min,
}

# CUDA's grid and block limits (compute capability ≥ 3.0).
GRID_LIMITS = (2**31 - 1, 65535, 65535)
MAX_THREADS_PER_BLOCK = 1024

_TORCH_DTYPES = {"f32": torch.float32, "i32": torch.int32, "i64": torch.int64}


class BundleError(ValueError):
    """A bundle is malformed, of another version, or cannot run these arguments."""


def evaluate(expr: Expr, shapes: Sequence[Sequence[int]]) -> int:
    """The value of a size expression for arguments of ``shapes`` (one shape per argument)."""
    if isinstance(expr, bool):
        raise BundleError(f"malformed size expression {expr!r}")
    if isinstance(expr, int):
        return expr
    if not isinstance(expr, list) or not expr:
        raise BundleError(f"malformed size expression {expr!r}")
    op = expr[0]
    if op == "dim" and len(expr) == 3:
        _, arg, axis = expr
        try:
            return int(shapes[arg][axis])
        except (IndexError, TypeError):
            raise BundleError(f"size expression {expr!r} names no argument dimension") from None
    if op in BINARY_OPS and len(expr) == 3:
        return BINARY_OPS[op](evaluate(expr[1], shapes), evaluate(expr[2], shapes))
    raise BundleError(f"malformed size expression {expr!r}")


def show(expr: Expr) -> str:
    """A size expression as text, e.g. ``((arg0[0] * 8) + 255) divu 256``."""
    if isinstance(expr, int):
        return str(expr)
    if expr[0] == "dim":
        return f"arg{expr[1]}[{expr[2]}]"
    return f"({show(expr[1])} {expr[0]} {show(expr[2])})"


# ---------------------------------------------------------------------------------------------
# The bundle on disk
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionPlan:
    """The plan of one host function: arguments (graph arrays, inputs, outputs), temporaries,
    steps."""

    name: str
    args: list[dict[str, Any]]
    outputs: int
    temps: list[dict[str, Any]]
    steps: list[dict[str, Any]]

    def kernels(self) -> list[str]:
        """The kernels this function launches, in order."""
        return [s["kernel"] for s in self.steps if s["op"] == "launch"]


@dataclass(frozen=True)
class Bundle:
    """A loaded bundle: the PTX, the plans by function name and the calling convention."""

    path: str
    ptx: str
    chip: str
    training: bool
    abi: dict[str, Any]
    functions: dict[str, FunctionPlan]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Bundle:
        """Read and check the bundle in directory ``path``."""
        path = os.fspath(path)
        plan_path, ptx_path = os.path.join(path, PLAN_FILE), os.path.join(path, PTX_FILE)
        if not os.path.isfile(plan_path) or not os.path.isfile(ptx_path):
            raise BundleError(f"'{path}' is not a bundle: it needs {PLAN_FILE} and {PTX_FILE}")
        try:
            with open(plan_path, encoding="utf-8") as f:
                plan = json.load(f)
            with open(ptx_path, encoding="utf-8") as f:
                ptx = f.read()
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise BundleError(f"cannot read the bundle '{path}': {err}") from None
        if not isinstance(plan, dict) or plan.get("version") != PLAN_VERSION:
            version = plan.get("version") if isinstance(plan, dict) else None
            raise BundleError(
                f"'{plan_path}' is plan version {version!r}; this executor reads version "
                f"{PLAN_VERSION} (rebuild the bundle with this Hector)"
            )
        try:
            functions = {
                name: FunctionPlan(name, f["args"], int(f["outputs"]), f["temps"], f["steps"])
                for name, f in plan["functions"].items()
            }
            bundle = cls(path, ptx, plan["chip"], bool(plan["training"]), plan["abi"], functions)
        except (KeyError, TypeError, AttributeError) as err:
            raise BundleError(f"'{plan_path}' is malformed: missing {err}") from None
        bundle._check_kernels()
        return bundle

    @cached_property
    def param_counts(self) -> dict[str, int]:
        """Each kernel's parameter count, read from the PTX."""
        return ptx_param_counts(self.ptx)

    def _check_kernels(self) -> None:
        counts = self.param_counts
        for fn in self.functions.values():
            for step in fn.steps:
                if step.get("op") == "launch" and step.get("kernel") not in counts:
                    raise BundleError(
                        f"the plan of {fn.name} launches {step.get('kernel')!r}, which "
                        f"{PTX_FILE} does not hold"
                    )

    @property
    def name(self) -> str:
        """The compiled function's name (its forward's plan)."""
        return str(self.abi["name"])


# ---------------------------------------------------------------------------------------------
# Running a plan
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One step a runner executed, for tests and logs: ``op`` and what it touched."""

    op: str
    kernel: str = ""
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)


_GRAPH_CACHE: weakref.WeakKeyDictionary[Any, dict[str, tuple[torch.Tensor, ...]]] = (
    weakref.WeakKeyDictionary()
)


def graph_arrays(g: Any, device: torch.device) -> tuple[torch.Tensor, ...]:
    """``g.arrays()`` on ``device``, copied once per (graph, device) while ``g`` lives."""
    per_graph = _GRAPH_CACHE.setdefault(g, {})
    key = str(device)
    if key not in per_graph:
        per_graph[key] = tuple(a.to(device).contiguous() for a in g.arrays())
    return per_graph[key]


def _pack(args: Sequence[Any]) -> tuple[Any, Any]:
    """:func:`~hector.runtime.launch.pack_params`'s ``(void**, keep-alive)`` for arguments
    that are all 64-bit (memrefs and ``index`` scalars), built from two ``array.array`` buffers
    instead of a ctypes object per parameter (a launch's Python cost matters: dozens of launches
    per training step). Anything else goes through ``pack_params``."""
    values: list[int] = []
    for a in args:
        if isinstance(a, MemRef):
            values += a.values()
        elif isinstance(a, int) and not isinstance(a, bool):
            values.append(a)
        else:
            return pack_params(args)
    if not values:
        return pack_params(args)
    cells = array.array("q", values)
    base, n = cells.buffer_info()
    slots = array.array("Q", range(base, base + 8 * n, 8))
    kind = _SLOT_ARRAYS.get(n)
    if kind is None:
        kind = _SLOT_ARRAYS[n] = ctypes.c_void_p * n
    return kind.from_buffer(slots), (cells, slots)


_SLOT_ARRAYS: dict[int, Any] = {}


def _memref(t: torch.Tensor) -> MemRef:
    """A memref over a contiguous tensor (CUDA, or host memory under a fake driver)."""
    return MemRef.from_pointer(t.data_ptr(), tuple(t.shape), tuple(t.stride()))


def _check_grid(kernel: str, grid: tuple[int, ...], block: tuple[int, ...]) -> None:
    for axis, (g, limit) in enumerate(zip(grid, GRID_LIMITS, strict=True)):
        if g > limit:
            raise BundleError(
                f"kernel {kernel} needs {g} blocks along {'xyz'[axis]}, over CUDA's limit of "
                f"{limit}: the graph is too large for this schedule"
            )
    threads = block[0] * block[1] * block[2]
    if min(block) <= 0 or threads > MAX_THREADS_PER_BLOCK:
        raise BundleError(f"kernel {kernel} has an invalid block {block}")


@dataclass
class BundleRunner:
    """Runs a bundle's functions: on CUDA tensors through the CUDA driver (one
    :class:`Launcher` per device), or on any tensors through ``launcher`` (a fake driver's)."""

    bundle: Bundle
    launcher: Launcher | None = None
    events: list[Event] | None = None  # a list to record every step into, or None
    _handles: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)
    _archs: dict[int, str] = field(default_factory=dict, repr=False)

    @property
    def training_abi(self) -> TrainingAbi:
        """The ABI of the bundle's ``<f>_train`` / ``<f>_backward`` pair."""
        name = self.bundle.name
        functions = self.bundle.abi["functions"]
        forward = functions[name]
        return TrainingAbi(
            name,
            forward["result_kinds"],
            forward["result_shapes"],
            functions[f"{name}_backward"]["grad_of"],
        )

    def _launcher(self, device: torch.device) -> Launcher:
        if self.launcher is not None:
            return self.launcher
        if device.type != "cuda":
            raise BundleError(
                "a bundle runs on CUDA tensors; the arguments are on the CPU (tests pass a "
                "launcher over a fake driver)"
            )
        index = device.index if device.index is not None else torch.cuda.current_device()
        launcher = _LAUNCHERS.get(index)
        if launcher is None:
            from .launch import CudaDriver

            launcher = _LAUNCHERS[index] = Launcher(CudaDriver(index))
        return launcher

    def _function(self, launcher: Launcher, kernel: str, args: Sequence[MemRef]) -> Any:
        """The kernel's handle (loaded once), its parameter count checked once."""
        arch = self._archs.get(id(launcher))
        if arch is None:  # one driver query per launcher, not per launch
            arch = self._archs[id(launcher)] = launcher.driver.arch()
        key = (arch, kernel)
        handle = self._handles.get(key)
        if handle is None:
            if _arch_number(arch) < _arch_number(self.bundle.chip):
                raise BundleError(
                    f"the bundle was built for {self.bundle.chip}, the device is {arch}: "
                    f"rebuild it with chip='{arch}'"
                )
            handle = launcher.function(self.bundle.ptx, kernel)
            want = self.bundle.param_counts[kernel]
            if want != param_count(args):
                raise BundleError(
                    f"kernel {kernel} takes {want} parameters; the plan passes {param_count(args)}"
                )
            self._handles[key] = handle
        return handle

    def _record(self, event: Event) -> None:
        if self.events is not None:
            self.events.append(event)

    def call(self, fname: str, g: Any, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Run function ``fname`` on graph ``g`` and ``tensors`` (inputs, as the compiled
        function takes them after the graph); return its outputs."""
        plan = self.bundle.functions.get(fname)
        if plan is None:
            raise BundleError(
                f"the bundle has no function {fname!r} (has: {', '.join(self.bundle.functions)})"
                + ("" if self.bundle.training else "; build it with training=True")
            )
        device = _device(tensors)
        self._launcher(device)  # no driver for these tensors: say so before anything runs
        arrays = graph_arrays(g, device)
        ins = [t.detach().to(device, torch.float32).contiguous() for t in tensors]
        expected = len(plan.args) - plan.outputs - len(arrays)
        if len(ins) != expected:
            raise BundleError(f"{fname} takes {expected} tensors after the graph, got {len(ins)}")
        shapes = [tuple(t.shape) for t in (*arrays, *ins)]
        outs: list[torch.Tensor] = []
        for spec in plan.args[len(shapes) :]:
            dims = [_out_dim(d, fname, g, self.bundle.abi, len(outs)) for d in spec["shape"]]
            outs.append(torch.empty(dims, dtype=_TORCH_DTYPES[spec["dtype"]], device=device))
        values = [*arrays, *ins, *outs]
        _check_args(fname, plan, values)
        self._run(plan, values, device)
        return outs

    def _run(self, plan: FunctionPlan, values: list[torch.Tensor], device: torch.device) -> None:
        shapes = [tuple(t.shape) for t in values]
        temps: dict[int, torch.Tensor] = {}

        def buffer(ref: dict[str, Any]) -> torch.Tensor:
            t = temps[ref["temp"]] if "temp" in ref else values[ref["arg"]]
            if "shape" in ref:  # a view with merged dimensions (memref.collapse_shape)
                return t.view([evaluate(d, shapes) for d in ref["shape"]])
            return t

        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        for step in plan.steps:
            op = step["op"]
            if op == "alloc":
                spec = plan.temps[step["temp"]]
                dims = [evaluate(d, shapes) for d in spec["shape"]]
                temps[step["temp"]] = torch.empty(
                    dims, dtype=_TORCH_DTYPES[spec["dtype"]], device=device
                )
            elif op == "free":
                del temps[step["temp"]]  # back to the caching allocator, stream-ordered
            elif op == "memset":
                buffer(step["dst"]).fill_(step["value"])
            elif op == "copy":
                buffer(step["dst"]).copy_(buffer(step["src"]))
            elif op == "launch":
                self._launch(step, shapes, buffer, device, stream)
            else:
                raise BundleError(f"plan step {op!r} is not part of plan version {PLAN_VERSION}")
            if op != "launch":
                self._record(Event(op))

    def _launch(
        self,
        step: dict[str, Any],
        shapes: list[tuple[int, ...]],
        buffer: Callable[[dict[str, Any]], torch.Tensor],
        device: torch.device,
        stream: int,
    ) -> None:
        kernel = step["kernel"]
        gx, gy, gz = (evaluate(e, shapes) for e in step["grid"])
        bx, by, bz = (evaluate(e, shapes) for e in step["block"])
        if min(gx, gy, gz) <= 0:  # nothing to do: an empty graph or edge type
            self._record(Event("skip", kernel, (gx, gy, gz), (bx, by, bz)))
            return
        _check_grid(kernel, (gx, gy, gz), (bx, by, bz))
        args: list[Any] = []
        for ref in step["args"]:
            if "index" in ref:
                args.append(evaluate(ref["index"], shapes))
            elif "f32" in ref:
                args.append(float(ref["f32"]))
            else:
                args.append(_memref(buffer(ref)))
        launcher = self._launcher(device)
        handle = self._function(launcher, kernel, args)
        params, keep = _pack(args)
        shared = evaluate(step.get("shared", 0), shapes)
        launcher.driver.launch(handle, (gx, gy, gz), (bx, by, bz), params, shared, stream)
        del keep
        self._record(Event("launch", kernel, (gx, gy, gz), (bx, by, bz)))


_LAUNCHERS: dict[int, Launcher] = {}


def _arch_number(arch: str) -> int:
    """``sm_90`` → 90, ``sm_90a`` → 90: PTX for an architecture runs on it and later ones (the
    driver compiles it for the device)."""
    digits = "".join(c for c in arch.removeprefix("sm_") if c.isdigit())
    return int(digits) if digits else 0


def _device(tensors: Sequence[torch.Tensor]) -> torch.device:
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        names = ", ".join(sorted(str(d) for d in devices))
        raise BundleError(f"the tensors are on several devices ({names}); use one")
    return devices.pop() if devices else torch.device("cpu")


def _out_dim(d: int | None, fname: str, g: Any, abi: dict[str, Any], i: int) -> int:
    if d is not None:
        return int(d)
    kind = abi["functions"][fname]["result_kinds"][i]
    return rows_of(kind, g)


def _check_args(fname: str, plan: FunctionPlan, values: Sequence[torch.Tensor]) -> None:
    """Every tensor has the rank, static dimensions and dtype the plan was built for."""
    for i, (spec, t) in enumerate(zip(plan.args, values, strict=True)):
        want = spec["shape"]
        have = list(t.shape)
        ok = len(want) == len(have) and all(
            w is None or w == h for w, h in zip(want, have, strict=False)
        )
        if not ok or t.dtype != _TORCH_DTYPES[spec["dtype"]]:
            shown = "x".join("?" if w is None else str(w) for w in want)
            raise BundleError(
                f"{fname}: argument #{i} must be {spec['dtype']}[{shown}], got "
                f"{str(t.dtype).removeprefix('torch.')}{have} (the bundle was built for other "
                "widths; rebuild it)"
            )


# ---------------------------------------------------------------------------------------------
# The callable
# ---------------------------------------------------------------------------------------------


def _check_graph(abi: dict[str, Any], g: Any, tensors: Sequence[torch.Tensor]) -> None:
    """Rows of node-/edge-wise arguments and slices of typed weights against the graph."""
    for i, (kind, t) in enumerate(zip(abi.get("arg_kinds", []), tensors, strict=False)):
        if kind in ("node", "edge") and t.shape[0] != rows_of(kind, g):
            raise BundleError(
                f"argument #{i} is {kind}-wise: expected {rows_of(kind, g)} rows, got {t.shape[0]}"
            )
    for pos, slice_ in abi.get("weight_slices", {}).items():
        want = g.num_etypes if slice_ == "etype" else g.num_ntypes
        if tensors[int(pos)].shape[0] != want:
            raise BundleError(
                f"argument #{pos} is sliced by {slice_}: expected {want} slices, got "
                f"{tensors[int(pos)].shape[0]}"
            )


class BundleFunction:
    """A bundle called like the compiled function: ``fn(g, *tensors)``. With a tensor that
    requires grad (and a training bundle) the result is differentiable."""

    def __init__(self, bundle: Bundle, launcher: Launcher | None = None) -> None:
        self.bundle = bundle
        self.runner = BundleRunner(bundle, launcher)

    @property
    def events(self) -> list[Event] | None:
        """The runner's record of steps (set it to a list to record)."""
        return self.runner.events

    @events.setter
    def events(self, value: list[Event] | None) -> None:
        self.runner.events = value

    def __call__(self, g: Any, *tensors: torch.Tensor) -> Any:
        """Run the bundle's forward (``<f>_train`` under autograd) on ``g`` and ``tensors``."""
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
                raise BundleError(f"argument #{i} must be a float32 torch.Tensor")
        _check_graph(self.bundle.abi, g, tensors)
        train = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        if train and self.bundle.training:
            outs = TrainingStep.apply(self.runner, g, *tensors)
        else:
            if train:
                raise BundleError(
                    "the inputs require grad but the bundle was built without training=True"
                )
            outs = self.runner.call(self.bundle.name, g, list(tensors))
        return outs[0] if len(outs) == 1 else tuple(outs)


def load(path: str | os.PathLike[str], driver: Driver | None = None) -> BundleFunction:
    """Load the bundle in directory ``path`` (``driver``: a stand-in for the CUDA driver)."""
    bundle = Bundle.load(path)
    return BundleFunction(bundle, Launcher(driver) if driver is not None else None)


# LaunchError is re-exported for callers that catch driver failures.
__all__ += ["LaunchError"]
