"""Turn ``plan.json`` text into validated, typed plan objects, or raise :class:`BundleError`.

The plan of an ahead-of-time bundle (``"version": 1``; format in docs/bundles.md) is read in
two stages, both before anything can run:

* :func:`parse_plan` (:mod:`hector.runtime.plan_json`) reads the bytes strictly: UTF-8,
  nesting at most :data:`MAX_JSON_DEPTH` deep, integers of at most 20 digits, no NaN, no
  number beyond a double; duplicate keys are kept to be reported with their path;
* :func:`validate_plan`, here, turns the JSON value into frozen objects (:class:`Plan`,
  :class:`FunctionPlan`, :class:`Launch`, :class:`BufferRef`, ...): types, ranges, indices,
  names, kernels and their parameter counts, temporaries allocated before use, the training
  pair's agreement; every error a :class:`BundleError` naming the JSON path.

Sizes are expressions over the arguments' dimensions (:mod:`hector.runtime.size_expressions`:
:class:`Dim`, :class:`BinOp` with the operators of :data:`BINARY_OPS`), evaluated exactly by
:func:`size_value` and refused when a step leaves int64. The executor
(:mod:`hector.runtime.bundle`) reads only these objects; the names of the two modules below
are re-exported here.

This module imports only the standard library.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, TypeAlias

from .plan_json import (
    INT64_MAX,
    INT64_MIN,
    MAX_INT_DIGITS,
    MAX_JSON_DEPTH,
    NAME,
    PLAN_FILE,
    BundleError,
    PlanValue,
    parse_plan,
    shown,
)
from .size_expressions import (
    BINARY_OPS,
    BinOp,
    Dim,
    Expr,
    Size,
    evaluate,
    parse_size,
    show,
    size_value,
)

__all__ = [
    "BINARY_OPS",
    "BLOCK_LIMITS",
    "GRID_LIMITS",
    "INT64_MAX",
    "INT64_MIN",
    "ITEMSIZE",
    "KINDS",
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "MAX_RANK",
    "MAX_SHARED_BYTES",
    "MAX_THREADS_PER_BLOCK",
    "PLAN_FILE",
    "PLAN_VERSION",
    "PTX_FILE",
    "Abi",
    "Alloc",
    "BinOp",
    "BufferRef",
    "BundleError",
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
    "Size",
    "Step",
    "TempSpec",
    "TensorSpec",
    "evaluate",
    "parse_plan",
    "show",
    "size_value",
    "validate_plan",
]

PTX_FILE = "kernels.ptx"
PLAN_VERSION = 1

# CUDA's grid and block limits (compute capability ≥ 3.0).
GRID_LIMITS = (2**31 - 1, 65535, 65535)
MAX_THREADS_PER_BLOCK = 1024
#: CUDA's block limits per axis, and the largest dynamic shared memory a launch can ask for
#: (``cuLaunchKernel`` takes an ``unsigned int``; the device's own limit is the driver's check).
BLOCK_LIMITS = (1024, 1024, 64)
MAX_SHARED_BYTES = 2**32 - 1
#: Most dimensions of a tensor in a plan.
MAX_RANK = 16
_F32_MAX = 3.4028234663852886e38
#: The bytes of an element of each dtype.
ITEMSIZE = {"f32": 4, "i32": 4, "i64": 8}
_INT_RANGE = {"i32": (-(2**31), 2**31 - 1), "i64": (INT64_MIN, INT64_MAX)}
#: The kinds of values (rows: the graph's nodes, edges, compacted edges; weights have none).
KINDS = ("node", "edge", "compact", "dst_compact", "weight")
_SLICES = ("etype", "ntype")
_CHIP = re.compile(r"sm_[0-9]{2,3}[a-z]?")
_POSITION = re.compile(r"0|[1-9][0-9]{0,8}")


# ---------------------------------------------------------------------------------------------
# The validated plan
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    """An argument of a host function: static dimensions (``None``: the graph's rows)."""

    shape: tuple[int | None, ...]
    dtype: str


@dataclass(frozen=True)
class TempSpec:
    """A temporary: its dimensions as size expressions over the arguments."""

    shape: tuple[Size, ...]
    dtype: str


@dataclass(frozen=True)
class BufferRef:
    """``{"arg": i}`` or ``{"temp": j}``, with ``view`` the dimensions of a reshape (or None)."""

    temp: bool
    index: int
    view: tuple[Size, ...] | None = None


@dataclass(frozen=True)
class IndexArg:
    """``{"index": size}``: a 64-bit integer kernel argument."""

    value: Size


@dataclass(frozen=True)
class F32Arg:
    """``{"f32": value}``: a 32-bit float kernel argument."""

    value: float


KernelArg: TypeAlias = BufferRef | IndexArg | F32Arg


@dataclass(frozen=True)
class Alloc:
    """Allocate temporary ``temp``."""

    temp: int


@dataclass(frozen=True)
class Free:
    """Free temporary ``temp``."""

    temp: int


@dataclass(frozen=True)
class Memset:
    """Fill ``dst`` with ``value``."""

    dst: BufferRef
    value: int | float


@dataclass(frozen=True)
class Copy:
    """Copy ``src`` into ``dst`` (equal shapes and dtypes)."""

    dst: BufferRef
    src: BufferRef


@dataclass(frozen=True)
class Launch:
    """Launch ``kernel`` on ``grid`` × ``block`` with ``shared`` bytes and ``args``."""

    kernel: str
    grid: tuple[Size, Size, Size]
    block: tuple[Size, Size, Size]
    shared: Size
    args: tuple[KernelArg, ...]


Step: TypeAlias = Alloc | Free | Memset | Copy | Launch


@dataclass(frozen=True)
class FunctionPlan:
    """The plan of one host function: arguments (graph arrays, inputs, outputs), temporaries,
    steps; every index in range and every temporary allocated before use (validated)."""

    name: str
    args: tuple[TensorSpec, ...]
    outputs: int
    temps: tuple[TempSpec, ...]
    steps: tuple[Step, ...]

    def kernels(self) -> list[str]:
        """The kernels this function launches, in order."""
        return [s.kernel for s in self.steps if isinstance(s, Launch)]

    def rank(self, ref: BufferRef) -> int:
        """The rank of a buffer as a step sees it."""
        if ref.view is not None:
            return len(ref.view)
        return len((self.temps if ref.temp else self.args)[ref.index].shape)

    def dtype(self, ref: BufferRef) -> str:
        """The element type of a buffer."""
        return (self.temps if ref.temp else self.args)[ref.index].dtype


@dataclass(frozen=True)
class FunctionAbi:
    """The calling convention of one function: its results' kinds and static shapes, the
    argument each gradient belongs to, how many results are saved for the backward."""

    result_kinds: tuple[str, ...]
    result_shapes: tuple[tuple[int | None, ...], ...]
    grad_of: tuple[int, ...]
    num_saved: int


@dataclass(frozen=True)
class Abi:
    """What calling and differentiating a bundle needs."""

    name: str
    result_kinds: tuple[str, ...] | None
    arg_kinds: tuple[str, ...] | None
    weight_slices: dict[int, str]
    functions: dict[str, FunctionAbi]


@dataclass(frozen=True)
class Plan:
    """A validated ``plan.json``."""

    chip: str
    training: bool
    abi: Abi
    functions: dict[str, FunctionPlan]


def _tensor_spec(at: PlanValue) -> TensorSpec:
    keys = at.obj(["shape", "dtype"])
    dims = keys["shape"].items(MAX_RANK)
    shape = tuple(
        None if d.value is None else d.as_int(0, what="a size >= 0 or null") for d in dims
    )
    return TensorSpec(shape, keys["dtype"].choice(list(ITEMSIZE)))


def _kinds(at: PlanValue) -> tuple[str, ...]:
    return tuple(k.choice(KINDS) for k in at.items())


class _Function:
    """Validates one function's plan, following which temporaries are live step by step."""

    def __init__(self, name: str, at: PlanValue, counts: dict[str, int]) -> None:
        keys = at.obj(["args", "outputs", "temps", "steps"])
        self.name, self.counts = name, counts
        self.args = tuple(_tensor_spec(a) for a in keys["args"].items(4096))
        self.ranks = [len(a.shape) for a in self.args]
        outputs = keys["outputs"].as_int(0, len(self.args), f"an int from 0 to {len(self.args)}")
        temps = []
        for t in keys["temps"].items(1 << 16):
            tk = t.obj(["shape", "dtype"])
            shape = tuple(parse_size(d, self.ranks) for d in tk["shape"].items(MAX_RANK))
            temps.append(TempSpec(shape, tk["dtype"].choice(list(ITEMSIZE))))
        self.plan = FunctionPlan(name, self.args, outputs, tuple(temps), ())
        self.live: set[int] = set()
        steps = tuple(self.step(s) for s in keys["steps"].items(1 << 20))
        self.plan = FunctionPlan(name, self.args, outputs, tuple(temps), steps)

    def buffer(self, at: PlanValue) -> BufferRef:
        v = at.value
        kind = "temp" if isinstance(v, dict) and "temp" in v else "arg"
        keys = at.obj([kind], ["shape"])
        if kind == "temp":
            index = keys["temp"].index("the function's temps", len(self.plan.temps))
            if index not in self.live:
                raise keys["temp"].fail(
                    f"temps[{index}] is used before its alloc or after its free"
                )
        else:
            index = keys["arg"].index("the function's args", len(self.args))
        view = None
        if "shape" in keys:
            view = tuple(parse_size(d, self.ranks) for d in keys["shape"].items(MAX_RANK))
        return BufferRef(kind == "temp", index, view)

    def step(self, at: PlanValue) -> Step:
        op = at.obj(
            ["op"], ["temp", "dst", "src", "value", "kernel", "grid", "block", "shared", "args"]
        )["op"].choice(["alloc", "free", "memset", "copy", "launch"])
        if op in ("alloc", "free"):
            keys = at.obj(["op", "temp"])
            temp = keys["temp"].index("the function's temps", len(self.plan.temps))
            if (temp in self.live) == (op == "alloc"):
                state = "already allocated" if op == "alloc" else "not allocated"
                raise keys["temp"].fail(f"temps[{temp}] is {state} here")
            (self.live.add if op == "alloc" else self.live.discard)(temp)
            return Alloc(temp) if op == "alloc" else Free(temp)
        if op == "memset":
            keys = at.obj(["op", "dst", "value"])
            dst = self.buffer(keys["dst"])
            return Memset(dst, _fill(keys["value"], self.plan.dtype(dst)))
        if op == "copy":
            keys = at.obj(["op", "dst", "src"])
            dst, src = self.buffer(keys["dst"]), self.buffer(keys["src"])
            if self.plan.dtype(dst) != self.plan.dtype(src):
                raise at.fail(f"copies {self.plan.dtype(src)} into {self.plan.dtype(dst)}")
            return Copy(dst, src)
        return self.launch(at)

    def launch(self, at: PlanValue) -> Launch:
        keys = at.obj(["op", "kernel", "grid", "block", "args"], ["shared"])
        kernel = keys["kernel"].as_str(NAME, "a kernel name")
        if kernel not in self.counts:
            raise keys["kernel"].fail(
                f"the plan launches {kernel!r}, which {PTX_FILE} does not hold"
            )
        grid, block = keys["grid"], keys["block"]
        if len(grid.items(3)) != 3 or len(block.items(3)) != 3:
            bad = grid if len(grid.value) != 3 else block
            raise bad.expected("[x, y, z]")
        gsizes = tuple(self.dim(grid.item(i), 1, GRID_LIMITS[i]) for i in range(3))
        bsizes = tuple(self.dim(block.item(i), 1, BLOCK_LIMITS[i]) for i in range(3))
        threads = math.prod(b for b in bsizes if isinstance(b, int))
        if all(isinstance(b, int) for b in bsizes) and threads > MAX_THREADS_PER_BLOCK:
            raise block.fail(f"{threads} threads a block, over CUDA's {MAX_THREADS_PER_BLOCK}")
        shared: Size = 0
        if "shared" in keys:
            shared = self.dim(keys["shared"], 0, MAX_SHARED_BYTES)
        args: list[KernelArg] = []
        for a in keys["args"].items(4096):
            if isinstance(a.value, dict) and "index" in a.value:
                args.append(IndexArg(parse_size(a.obj(["index"])["index"], self.ranks)))
            elif isinstance(a.value, dict) and "f32" in a.value:
                args.append(F32Arg(float(_fill(a.obj(["f32"])["f32"], "f32"))))
            else:
                args.append(self.buffer(a))
        have = sum(3 + 2 * self.plan.rank(a) if isinstance(a, BufferRef) else 1 for a in args)
        if have != self.counts[kernel]:
            raise keys["args"].fail(
                f"kernel {kernel} takes {self.counts[kernel]} parameters; these arguments "
                f"expand to {have}"
            )
        return Launch(kernel, gsizes, bsizes, shared, tuple(args))  # type: ignore[arg-type]

    def dim(self, at: PlanValue, lo: int, hi: int) -> Size:
        """A grid, block or shared-memory size: a literal within ``[lo, hi]`` or an expression
        (checked when evaluated)."""
        if isinstance(at.value, list):
            return parse_size(at, self.ranks)
        what = "a positive int" if lo == 1 else "an int >= 0"
        return at.as_int(lo, hi, f"{what} (at most {hi})")


def _fill(at: PlanValue, dtype: str) -> int | float:
    """A fill value or float argument for ``dtype``: an int within an integer dtype's range, or
    a number within float32's or an infinity (never NaN)."""
    v = at.value
    if dtype in _INT_RANGE:
        lo, hi = _INT_RANGE[dtype]
        return at.as_int(lo, hi, f"an {dtype} value")
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise at.expected("a float32 value")
    if not (abs(v) <= _F32_MAX or math.isinf(v)):
        raise at.expected("a float32 value (within ±3.4e38, or ±Infinity)")
    return v


def _parse_abi(at: PlanValue, functions: dict[str, FunctionPlan]) -> Abi:
    keys = at.obj(["name", "functions"], ["result_kinds", "arg_kinds", "weight_slices"])
    name = keys["name"].as_str(NAME, "a function name")
    if name not in functions:
        raise keys["name"].fail(f"names {name!r}, which is not one of the plan's functions")
    result_kinds = _kinds(keys["result_kinds"]) if "result_kinds" in keys else None
    arg_kinds = _kinds(keys["arg_kinds"]) if "arg_kinds" in keys else None
    slices: dict[int, str] = {}
    for pos, value in keys["weight_slices"].entries() if "weight_slices" in keys else []:
        if not _POSITION.fullmatch(pos) or (arg_kinds is not None and int(pos) >= len(arg_kinds)):
            bound = f" below {len(arg_kinds)}" if arg_kinds is not None else ""
            raise value.fail(f"key {pos!r} must be an argument position{bound}")
        slices[int(pos)] = value.choice(_SLICES)
    fabis: dict[str, FunctionAbi] = {}
    for fname, fat in keys["functions"].entries():
        if fname not in functions:
            raise fat.fail(f"{fname!r} is not one of the plan's functions")
        fabis[fname] = _function_abi(fat, functions[fname])
    return Abi(name, result_kinds, arg_kinds, slices, fabis)


def _function_abi(at: PlanValue, plan: FunctionPlan) -> FunctionAbi:
    keys = at.obj(["result_kinds", "result_shapes", "grad_of", "num_saved"])
    kinds = _kinds(keys["result_kinds"])
    shapes = []
    for s in keys["result_shapes"].items():
        dims = s.items(MAX_RANK)
        shapes.append(
            tuple(
                None if d.value is None else d.as_int(0, what="a size >= 0 or null") for d in dims
            )
        )
    outs = plan.args[len(plan.args) - plan.outputs :]
    if len(kinds) != plan.outputs or len(shapes) != plan.outputs:
        raise at.fail(
            f"must give a kind and a shape for each of {plan.name}'s {plan.outputs} outputs"
        )
    for i, (shape, spec) in enumerate(zip(shapes, outs, strict=True)):
        if shape != spec.shape:
            raise (
                keys["result_shapes"]
                .item(i)
                .fail(f"is not the shape of output {i} {list(spec.shape)}")
            )
    grad_of = tuple(g.as_int(0, 4095, "an argument position") for g in keys["grad_of"].items())
    if grad_of and len(grad_of) != plan.outputs:
        raise keys["grad_of"].fail(f"must name an argument for each of the {plan.outputs} outputs")
    num_saved = keys["num_saved"].as_int(0, plan.outputs, f"an int from 0 to {plan.outputs}")
    return FunctionAbi(kinds, tuple(shapes), grad_of, num_saved)


def _check_training(at: PlanValue, abi: Abi, functions: dict[str, FunctionPlan]) -> None:
    """A training bundle's ``<f>_train`` / ``<f>_backward`` pair fits together: the backward
    takes the train's inputs, saved values and one gradient per result, and gives one gradient
    per ``grad_of`` entry, each of an input."""
    name = abi.name
    for fname in (name, f"{name}_train", f"{name}_backward"):
        if fname not in functions:
            raise at.key("functions").fail(f"a training bundle needs a function {fname!r}")
        if fname not in abi.functions:
            raise at.key("abi").key("functions").fail(f"a training bundle needs {fname!r}")
    train, backward = functions[f"{name}_train"], functions[f"{name}_backward"]
    n = len(abi.functions[name].result_kinds)
    grad_of = abi.functions[f"{name}_backward"].grad_of
    where = at.key("abi").key("functions").key(f"{name}_backward")
    if len(grad_of) != backward.outputs:
        raise where.fail(f"grad_of must name an argument for each of {backward.outputs} outputs")
    inputs = len(train.args) - train.outputs
    outs = train.args[inputs:]
    want = (*train.args[:inputs], *outs[n:], *outs[:n])
    if n > train.outputs or backward.args[: len(backward.args) - backward.outputs] != want:
        raise (
            at.key("functions")
            .key(f"{name}_backward")
            .fail(f"its arguments are not {name}_train's inputs, saved values and result gradients")
        )
    if any(spec.dtype != "f32" for spec in outs):
        raise at.key("functions").key(f"{name}_train").fail("its results must all be f32")
    forward = abi.functions[name]
    if forward.result_shapes != tuple(spec.shape for spec in outs[:n]) or (
        forward.result_kinds != abi.functions[f"{name}_train"].result_kinds[:n]
    ):
        raise where.fail(f"{name}'s results are not the first {n} of {name}_train's")
    if abi.arg_kinds is not None and any(p >= len(abi.arg_kinds) for p in grad_of):
        raise where.fail(f"grad_of names an argument beyond the {len(abi.arg_kinds)} inputs")


def validate_plan(value: Any, param_counts: dict[str, int]) -> Plan:
    """The validated plan of a parsed ``plan.json`` whose kernels (with their parameter counts)
    are ``param_counts``; any departure from version 1 is a :class:`BundleError` naming its path."""
    root = PlanValue(value)
    if not isinstance(value, dict):
        raise root.expected("an object")
    version = value.get("version")
    if "version" in value:
        version = root.key("version").as_int(what="an int")
    if version != PLAN_VERSION:
        raise BundleError(
            f"{PLAN_FILE} is plan version {version!r}; this executor reads version "
            f"{PLAN_VERSION} (rebuild the bundle with this Hector)"
        )
    keys = root.obj(["version", "chip", "training", "abi", "functions"])
    chip = keys["chip"].as_str(_CHIP, "an architecture such as 'sm_90'")
    training = keys["training"].as_bool()
    functions: dict[str, FunctionPlan] = {}
    for fname, fat in keys["functions"].entries():
        if not NAME.fullmatch(fname):
            raise fat.fail(f"{shown(fname)} is not a function name")
        functions[fname] = _Function(fname, fat, param_counts).plan
    if not functions:
        raise keys["functions"].fail("a plan needs at least one function")
    abi = _parse_abi(keys["abi"], functions)
    for fname, fn in functions.items():
        outs = fn.args[len(fn.args) - fn.outputs :]
        if any(None in spec.shape for spec in outs) and fname not in abi.functions:
            raise (
                keys["abi"]
                .key("functions")
                .fail(f"{fname!r} has outputs sized by the graph but no result kinds here")
            )
    if training:
        _check_training(root, abi, functions)
    return Plan(chip, training, abi, functions)
