"""Run an ahead-of-time bundle (``hector.bundle.build``) with PyTorch and the CUDA driver alone.

A bundle is a directory with ``kernels.ptx`` and ``plan.json`` (``"version": 1``; format in
docs/bundles.md). :func:`load` reads it and returns a :class:`BundleFunction`, called like the
compiled function (``fn(g, *tensors)``; differentiable when built for training). Each call walks
the plan of one host function:

* sizes are expressions over the arguments' dimensions (:func:`evaluate`: integers,
  ``["dim", arg, axis]`` and the binary operators of :data:`BINARY_OPS`), computed exactly and
  refused when a step leaves int64, so no grid overflows silently; a grid beyond CUDA's limits
  or below zero is an error;
* temporaries are ``torch.empty`` on the tensors' device (PyTorch's caching allocator: no
  ``cudaMalloc``/``cudaFree`` per call); memsets and copies are ``fill_``/``copy_``; kernels run
  on PyTorch's current stream, so the call is ordered like any PyTorch op and never synchronizes;
* a launch whose grid has no block (an empty graph, an edge type without edges) is skipped;
* nothing runs before everything is checked: :meth:`Bundle.load` reads the files (bounded
  sizes, no links) and :mod:`hector.runtime.bundle_plan` turns ``plan.json`` into validated
  objects (:func:`parse_plan`, from :mod:`hector.runtime.plan_json`: strict JSON;
  :func:`validate_plan`: types, ranges, indices, names, kernels and their parameter counts,
  the training pair's agreement), every error a :class:`BundleError` naming the JSON path
  (those names are re-exported here); each call then evaluates every size of the plan for its
  arguments before the first buffer is allocated or kernel launched (a training step checks
  its backward before its forward runs). The executor reads only the validated objects;
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
import math
import os
import stat
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from .bundle_plan import (
    BINARY_OPS,
    BLOCK_LIMITS,
    GRID_LIMITS,
    INT64_MAX,
    INT64_MIN,
    ITEMSIZE,
    KINDS,
    MAX_INT_DIGITS,
    MAX_JSON_DEPTH,
    MAX_RANK,
    MAX_SHARED_BYTES,
    MAX_THREADS_PER_BLOCK,
    PLAN_FILE,
    PLAN_VERSION,
    PTX_FILE,
    Abi,
    Alloc,
    BinOp,
    BufferRef,
    BundleError,
    Copy,
    Dim,
    Expr,
    F32Arg,
    Free,
    FunctionAbi,
    FunctionPlan,
    IndexArg,
    KernelArg,
    Launch,
    Memset,
    Plan,
    Size,
    Step,
    TempSpec,
    TensorSpec,
    evaluate,
    parse_plan,
    show,
    size_value,
    validate_plan,
)
from .launch import (
    Driver,
    Launcher,
    LaunchError,
    MemRef,
    pack_params,
    ptx_param_counts,
)
from .training import TrainingAbi, TrainingStep, rows_of

__all__ = [
    "BINARY_OPS",
    "GRID_LIMITS",
    "INT64_MIN",
    "KINDS",
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "MAX_PLAN_BYTES",
    "MAX_PTX_BYTES",
    "MAX_RANK",
    "PLAN_FILE",
    "PLAN_VERSION",
    "PTX_FILE",
    "Abi",
    "Alloc",
    "BinOp",
    "BufferRef",
    "Bundle",
    "BundleError",
    "BundleFunction",
    "BundleRunner",
    "Copy",
    "Dim",
    "Expr",
    "F32Arg",
    "Free",
    "FunctionAbi",
    "FunctionPlan",
    "IndexArg",
    "KernelArg",
    "Launch",
    "Memset",
    "Plan",
    "Step",
    "TempSpec",
    "TensorSpec",
    "evaluate",
    "load",
    "parse_plan",
    "show",
    "validate_plan",
]

_TORCH_DTYPES = {"f32": torch.float32, "i32": torch.int32, "i64": torch.int64}

#: Largest ``plan.json`` and ``kernels.ptx`` the loader reads, in bytes.
MAX_PLAN_BYTES = 16 * 2**20
MAX_PTX_BYTES = 256 * 2**20


# ---------------------------------------------------------------------------------------------
# The bundle on disk
# ---------------------------------------------------------------------------------------------


def _read_file(directory: int, path: str, name: str, limit: int) -> bytes:
    """The bytes of regular file ``name`` in the open directory (no symbolic link, no device
    or FIFO, at most ``limit`` bytes)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(name, flags, dir_fd=directory)
    except FileNotFoundError:
        raise BundleError(
            f"'{path}' is not a bundle: it needs {PLAN_FILE} and {PTX_FILE}"
        ) from None
    except OSError as err:
        if os.path.islink(os.path.join(path, name)):
            raise BundleError(
                f"'{path}': {name} is a symbolic link; a bundle's files must be its own"
            ) from None
        raise BundleError(f"cannot read the bundle '{path}': {err}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BundleError(f"'{path}': {name} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise BundleError(f"'{path}': {name} is larger than {limit} bytes")
    return data


@dataclass(frozen=True)
class Bundle:
    """A loaded bundle: the PTX, the validated plans by function name and the calling
    convention."""

    path: str
    ptx: str
    chip: str
    training: bool
    abi: Abi
    functions: dict[str, FunctionPlan]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Bundle:
        """Read and validate the bundle in directory ``path``: all of it, before anything can
        run (see docs/bundles.md, "What the loader checks")."""
        path = os.fspath(path)
        try:
            directory = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            raise BundleError(
                f"'{path}' is not a bundle: it needs {PLAN_FILE} and {PTX_FILE}"
            ) from None
        try:
            plan_bytes = _read_file(directory, path, PLAN_FILE, MAX_PLAN_BYTES)
            ptx_bytes = _read_file(directory, path, PTX_FILE, MAX_PTX_BYTES)
        finally:
            os.close(directory)
        try:
            ptx = ptx_bytes.decode("utf-8")
        except UnicodeDecodeError as err:
            raise BundleError(f"'{path}': {PTX_FILE} is not UTF-8 (byte {err.start})") from None
        try:
            plan = validate_plan(parse_plan(plan_bytes), ptx_param_counts(ptx))
        except BundleError as err:
            raise BundleError(f"cannot read the bundle '{path}': {err}") from None
        return cls(path, ptx, plan.chip, plan.training, plan.abi, plan.functions)

    @cached_property
    def param_counts(self) -> dict[str, int]:
        """Each kernel's parameter count, read from the PTX."""
        return ptx_param_counts(self.ptx)

    @property
    def name(self) -> str:
        """The compiled function's name (its forward's plan)."""
        return self.abi.name


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
    """Grid and block sizes as evaluated: a negative grid is an error (0 blocks: skipped)."""
    for axis, (g, limit) in enumerate(zip(grid, GRID_LIMITS, strict=True)):
        if g < 0:
            raise BundleError(f"kernel {kernel} has a negative grid {grid}")
        if g > limit:
            raise BundleError(
                f"kernel {kernel} needs {g} blocks along {'xyz'[axis]}, over CUDA's limit of "
                f"{limit}: the graph is too large for this schedule"
            )
    threads = block[0] * block[1] * block[2]
    over = any(b > limit for b, limit in zip(block, BLOCK_LIMITS, strict=True))
    if min(block) <= 0 or over or threads > MAX_THREADS_PER_BLOCK:
        raise BundleError(f"kernel {kernel} has an invalid block {block}")


@dataclass(frozen=True)
class _Buf:
    """A buffer of a step, its view's dimensions evaluated."""

    temp: bool
    index: int
    view: tuple[int, ...] | None


@dataclass(frozen=True)
class _Ready:
    """A step with every size evaluated for one call's arguments (nothing left to check)."""

    op: str
    temp: int = -1
    dims: tuple[int, ...] = ()
    dtype: str = ""
    dst: _Buf | None = None
    src: _Buf | None = None
    value: int | float = 0
    kernel: str = ""
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    shared: int = 0
    args: tuple[_Buf | int | float, ...] = ()


def _resolve(plan: FunctionPlan, shapes: Sequence[tuple[int, ...]]) -> list[_Ready]:
    """Every step of ``plan`` with its sizes evaluated for arguments of ``shapes``, checked
    all at once *before* anything is allocated or launched: sizes and views non-negative and
    within int64, views of as many elements as their buffer, copies between equal shapes,
    grids non-negative and within CUDA's limits, blocks and shared memory within theirs."""
    temps: dict[int, tuple[int, ...]] = {}
    prefix = f"{PLAN_FILE}: functions.{plan.name}.steps"
    temps_at = f"{PLAN_FILE}: functions.{plan.name}.temps"

    def sizes(exprs: Sequence[Size], where: str) -> tuple[int, ...]:
        dims = tuple(size_value(e, shapes) for e in exprs)
        if any(d < 0 for d in dims):
            raise BundleError(f"{where}: a negative size {list(dims)} for these arguments")
        return dims

    def buf(ref: BufferRef, where: str) -> tuple[_Buf, tuple[int, ...]]:
        base = temps[ref.index] if ref.temp else tuple(shapes[ref.index])
        if ref.view is None:
            return _Buf(ref.temp, ref.index, None), base
        dims = sizes(ref.view, f"{where}.shape")
        if math.prod(dims) != math.prod(base):
            raise BundleError(f"{where}.shape: a view {list(dims)} of a buffer {list(base)}")
        return _Buf(ref.temp, ref.index, dims), dims

    ready: list[_Ready] = []
    for i, step in enumerate(plan.steps):
        at = f"{prefix}[{i}]"
        try:
            if isinstance(step, Alloc):
                dims = sizes(plan.temps[step.temp].shape, f"{temps_at}[{step.temp}]")
                nbytes = math.prod(dims) * ITEMSIZE[plan.temps[step.temp].dtype]
                if nbytes > INT64_MAX:
                    raise BundleError(f"{at}: temps[{step.temp}] {list(dims)} is too large")
                temps[step.temp] = dims
                ready.append(_Ready("alloc", step.temp, dims, plan.temps[step.temp].dtype))
            elif isinstance(step, Free):
                ready.append(_Ready("free", temp=step.temp))
            elif isinstance(step, Memset):
                ready.append(_Ready("memset", dst=buf(step.dst, f"{at}.dst")[0], value=step.value))
            elif isinstance(step, Copy):
                (dst, dshape), (src, sshape) = (
                    buf(step.dst, f"{at}.dst"),
                    buf(step.src, f"{at}.src"),
                )
                if dshape != sshape:
                    raise BundleError(f"{at}: copies {list(sshape)} into {list(dshape)}")
                ready.append(_Ready("copy", dst=dst, src=src))
            else:
                ready.append(_ready_launch(step, at, shapes, buf))
        except BundleError as err:
            if str(err).startswith(PLAN_FILE):
                raise
            raise BundleError(f"{at}: {err}") from None
    return ready


def _ready_launch(
    step: Launch,
    at: str,
    shapes: Sequence[tuple[int, ...]],
    buf: Callable[[BufferRef, str], tuple[_Buf, tuple[int, ...]]],
) -> _Ready:
    gx, gy, gz = (size_value(e, shapes) for e in step.grid)
    bx, by, bz = (size_value(e, shapes) for e in step.block)
    _check_grid(step.kernel, (gx, gy, gz), (bx, by, bz))
    shared = size_value(step.shared, shapes)
    if not 0 <= shared <= MAX_SHARED_BYTES:
        raise BundleError(f"{at}.shared: {shared} bytes of shared memory")
    args: list[_Buf | int | float] = []
    for k, a in enumerate(step.args):
        if isinstance(a, IndexArg):
            args.append(size_value(a.value, shapes))
        elif isinstance(a, F32Arg):
            args.append(a.value)
        else:
            args.append(buf(a, f"{at}.args[{k}]")[0])
    skip = min(gx, gy, gz) == 0  # nothing to do: an empty graph or edge type
    return _Ready(
        "skip" if skip else "launch",
        kernel=step.kernel,
        grid=(gx, gy, gz),
        block=(bx, by, bz),
        shared=shared,
        args=tuple(args),
    )


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
        functions = self.bundle.abi.functions
        forward = functions[name]
        return TrainingAbi(
            name,
            forward.result_kinds,
            forward.result_shapes,
            functions[f"{name}_backward"].grad_of,
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

    def _functions(self, launcher: Launcher, plan: FunctionPlan) -> dict[str, Any]:
        """The handles of every kernel ``plan`` launches (loaded once), before it runs."""
        arch = self._archs.get(id(launcher))
        if arch is None:  # one driver query per launcher, not per launch
            arch = self._archs[id(launcher)] = launcher.driver.arch()
        if _arch_number(arch) < _arch_number(self.bundle.chip):
            raise BundleError(
                f"the bundle was built for {self.bundle.chip}, the device is {arch}: "
                f"rebuild it with chip='{arch}'"
            )
        handles = {}
        for kernel in plan.kernels():
            key = (arch, kernel)
            handle = self._handles.get(key)
            if handle is None:
                handle = self._handles[key] = launcher.function(self.bundle.ptx, kernel)
            handles[kernel] = handle
        return handles

    def check_backward(self, g: Any, tensors: Sequence[torch.Tensor]) -> None:
        """Evaluate every size of ``<f>_backward`` for a training step on ``g`` and ``tensors``
        (its arguments' shapes follow from theirs), so that a backward that could not run
        is refused before the forward runs."""
        abi, name = self.bundle.abi, self.bundle.name
        train = self.bundle.functions[f"{name}_train"]
        backward = self.bundle.functions[f"{name}_backward"]
        arrays = graph_arrays(g, _device(tensors))  # cached: the forward reuses them
        given = [tuple(a.shape) for a in arrays] + [tuple(t.shape) for t in tensors]
        if len(given) != len(train.args) - train.outputs:
            return  # the forward refuses these tensors itself
        results = train.args[len(given) :]
        outs = [
            tuple(_out_dim(d, train.name, g, abi, i) for d in spec.shape)
            for i, spec in enumerate(results)
        ]
        n = len(abi.functions[name].result_kinds)
        grads = [
            tuple(_out_dim(d, backward.name, g, abi, i) for d in spec.shape)
            for i, spec in enumerate(backward.args[len(backward.args) - backward.outputs :])
        ]
        _resolve(backward, [*given, *outs[n:], *outs[:n], *grads])

    def _record(self, event: Event) -> None:
        if self.events is not None:
            self.events.append(event)

    def call(self, fname: str, g: Any, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Run function ``fname`` on graph ``g`` and ``tensors`` (inputs, as the compiled
        function takes them after the graph); return its outputs. Everything is checked (the
        arguments, every size the plan computes from them, the kernels' handles) before the
        first buffer is allocated."""
        plan = self.bundle.functions.get(fname)
        if plan is None:
            raise BundleError(
                f"the bundle has no function {fname!r} (has: {', '.join(self.bundle.functions)})"
                + ("" if self.bundle.training else "; build it with training=True")
            )
        device = _device(tensors)
        launcher = self._launcher(device)  # no driver for these tensors: say so first
        arrays = graph_arrays(g, device)
        ins = [t.detach().to(device, torch.float32).contiguous() for t in tensors]
        expected = len(plan.args) - plan.outputs - len(arrays)
        if len(ins) != expected:
            raise BundleError(f"{fname} takes {expected} tensors after the graph, got {len(ins)}")
        given = [*arrays, *ins]
        _check_args(fname, plan, given)
        out_specs = plan.args[len(given) :]
        out_shapes = [
            tuple(_out_dim(d, fname, g, self.bundle.abi, i) for d in spec.shape)
            for i, spec in enumerate(out_specs)
        ]
        ready = _resolve(plan, [*(tuple(t.shape) for t in given), *out_shapes])
        handles = self._functions(launcher, plan)
        outs = [
            torch.empty(dims, dtype=_TORCH_DTYPES[spec.dtype], device=device)
            for dims, spec in zip(out_shapes, out_specs, strict=True)
        ]
        self._run(ready, [*given, *outs], device, launcher, handles)
        return outs

    def _run(
        self,
        ready: list[_Ready],
        values: list[torch.Tensor],
        device: torch.device,
        launcher: Launcher,
        handles: dict[str, Any],
    ) -> None:
        temps: dict[int, torch.Tensor] = {}

        def buffer(b: _Buf | None) -> torch.Tensor:
            assert b is not None
            t = temps[b.index] if b.temp else values[b.index]
            return t if b.view is None else t.view(b.view)  # a merged view (collapse_shape)

        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        for step in ready:
            op = step.op
            if op == "alloc":
                dtype = _TORCH_DTYPES[step.dtype]
                temps[step.temp] = torch.empty(step.dims, dtype=dtype, device=device)
            elif op == "free":
                del temps[step.temp]  # back to the caching allocator, stream-ordered
            elif op == "memset":
                buffer(step.dst).fill_(step.value)
            elif op == "copy":
                buffer(step.dst).copy_(buffer(step.src))
            elif op == "launch":
                args = [a if isinstance(a, int | float) else _memref(buffer(a)) for a in step.args]
                params, keep = _pack(args)
                launcher.driver.launch(
                    handles[step.kernel], step.grid, step.block, params, step.shared, stream
                )
                del keep
            if op in ("launch", "skip"):
                self._record(Event(op, step.kernel, step.grid, step.block))
            else:
                self._record(Event(op))


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


def _out_dim(d: int | None, fname: str, g: Any, abi: Abi, i: int) -> int:
    if d is not None:
        return d
    return rows_of(abi.functions[fname].result_kinds[i], g)  # validated: the kind is there


def _check_args(fname: str, plan: FunctionPlan, values: Sequence[torch.Tensor]) -> None:
    """Every tensor has the rank, static dimensions and dtype the plan was built for."""
    for i, (spec, t) in enumerate(zip(plan.args, values, strict=False)):
        want = spec.shape
        have = list(t.shape)
        ok = len(want) == len(have) and all(
            w is None or w == h for w, h in zip(want, have, strict=False)
        )
        if not ok or t.dtype != _TORCH_DTYPES[spec.dtype]:
            shown = "x".join("?" if w is None else str(w) for w in want)
            raise BundleError(
                f"{fname}: argument #{i} must be {spec.dtype}[{shown}], got "
                f"{str(t.dtype).removeprefix('torch.')}{have} (the bundle was built for other "
                "widths; rebuild it)"
            )


# ---------------------------------------------------------------------------------------------
# The callable
# ---------------------------------------------------------------------------------------------


def _check_graph(abi: Abi, g: Any, tensors: Sequence[torch.Tensor]) -> None:
    """Rows of node-/edge-wise arguments and slices of typed weights against the graph."""
    for i, (kind, t) in enumerate(zip(abi.arg_kinds or (), tensors, strict=False)):
        if kind in ("node", "edge") and (t.dim() == 0 or t.shape[0] != rows_of(kind, g)):
            raise BundleError(
                f"argument #{i} is {kind}-wise: expected {rows_of(kind, g)} rows, got "
                f"{t.shape[0] if t.dim() else 'a scalar'}"
            )
    for pos, slice_ in abi.weight_slices.items():
        want = g.num_etypes if slice_ == "etype" else g.num_ntypes
        if pos >= len(tensors):
            raise BundleError(f"argument #{pos} is sliced by {slice_}, but {len(tensors)} given")
        have = tensors[pos].shape[0] if tensors[pos].dim() else None
        if have != want:
            raise BundleError(
                f"argument #{pos} is sliced by {slice_}: expected {want} slices, got {have}"
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
            grad_of = self.bundle.abi.functions[f"{self.bundle.name}_backward"].grad_of
            if any(pos >= len(tensors) for pos in grad_of):
                raise BundleError(
                    f"the bundle's gradients are of {max(grad_of) + 1} or more tensors, "
                    f"{len(tensors)} given"
                )
            self.runner.check_backward(g, tensors)
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
