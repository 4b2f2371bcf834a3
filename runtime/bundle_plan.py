"""Turn ``plan.json`` text into validated, typed plan objects, or raise :class:`BundleError`.

The plan of an ahead-of-time bundle (``"version": 1``; format in docs/bundles.md) is read in
two stages, both before anything can run:

* :func:`parse_plan` reads the bytes strictly: UTF-8, nesting at most :data:`MAX_JSON_DEPTH`
  deep, integers of at most 20 digits, no NaN, no number beyond a double; duplicate keys are
  kept to be reported with their path;
* :func:`validate_plan` turns the JSON value into frozen objects (:class:`Plan`,
  :class:`FunctionPlan`, :class:`Launch`, :class:`BufferRef`, ...): types, ranges, indices,
  names, kernels and their parameter counts, temporaries allocated before use, the training
  pair's agreement; every error a :class:`BundleError` naming the JSON path.

Sizes are expressions over the arguments' dimensions (:class:`Dim`, :class:`BinOp` with the
operators of :data:`BINARY_OPS`), evaluated exactly by :func:`size_value` and refused when a
step leaves int64. The executor (:mod:`hector.runtime.bundle`) reads only these objects.

This module imports only the standard library.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

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


# ---------------------------------------------------------------------------------------------
# Limits of a plan (what the validator accepts)
# ---------------------------------------------------------------------------------------------

#: Deepest nesting of arrays and objects in ``plan.json`` (a plan needs about 16).
MAX_JSON_DEPTH = 64
#: Most digits of an integer literal in ``plan.json`` (int64 has 19).
MAX_INT_DIGITS = 20
#: Most dimensions of a tensor in a plan.
MAX_RANK = 16
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: CUDA's block limits per axis, and the largest dynamic shared memory a launch can ask for
#: (``cuLaunchKernel`` takes an ``unsigned int``; the device's own limit is the driver's check).
BLOCK_LIMITS = (1024, 1024, 64)
MAX_SHARED_BYTES = 2**32 - 1
_F32_MAX = 3.4028234663852886e38
#: The bytes of an element of each dtype.
ITEMSIZE = {"f32": 4, "i32": 4, "i64": 8}
_INT_RANGE = {"i32": (-(2**31), 2**31 - 1), "i64": (INT64_MIN, INT64_MAX)}
#: The kinds of values (rows: the graph's nodes, edges, compacted edges; weights have none).
KINDS = ("node", "edge", "compact", "dst_compact", "weight")
_SLICES = ("etype", "ntype")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]{0,255}")
_CHIP = re.compile(r"sm_[0-9]{2,3}[a-z]?")
_POSITION = re.compile(r"0|[1-9][0-9]{0,8}")


class BundleError(ValueError):
    """A bundle is malformed, of another version, or cannot run these arguments."""


# ---------------------------------------------------------------------------------------------
# Reading plan.json: strict JSON, bounded depth, every value with its path
# ---------------------------------------------------------------------------------------------


class _Object(dict[str, Any]):
    """A JSON object that remembers the keys its text repeats (reported with their path)."""

    duplicates: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        keys = [k for k, _ in pairs]
        obj.duplicates = tuple(sorted({k for k in keys if keys.count(k) > 1}))
    return obj


def _constant(name: str) -> float:
    """``Infinity`` and ``-Infinity`` (fill values of max/min reductions: the writer's
    ``json.dump`` writes them so), kept for the checks to allow as float32 values only;
    ``NaN`` is refused."""
    if name == "NaN":
        raise BundleError(f"{PLAN_FILE}: NaN is refused (no plan value can be NaN)")
    return -math.inf if name.startswith("-") else math.inf


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise BundleError(f"{PLAN_FILE}: integer {text[:24]}... has more than 20 digits")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BundleError(f"{PLAN_FILE}: number {text[:24]} is out of range")
    return value


# A string, or an unterminated one to the end (linear: never rescans the text).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_BRACKETS = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def parse_plan(data: bytes) -> Any:
    """The JSON value of ``plan.json``'s bytes: strict UTF-8, no NaN (``Infinity`` is kept for
    the checks to allow as a float32 value only), no number beyond a double, integers of at
    most 20 digits, nesting at most :data:`MAX_JSON_DEPTH` deep; duplicate keys are kept for
    :class:`_At` to report with their path. Anything else is a :class:`BundleError`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BundleError(f"{PLAN_FILE}: not UTF-8 (byte {err.start}: {err.reason})") from None
    brackets = _BRACKETS.sub("", _STRING.sub('""', text))
    depth = max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)
    if depth > MAX_JSON_DEPTH:
        raise BundleError(
            f"{PLAN_FILE}: nested {depth} deep; a plan nests at most {MAX_JSON_DEPTH}"
        )
    try:
        return json.loads(
            text,
            object_pairs_hook=_object,
            parse_constant=_constant,
            parse_int=_json_int,
            parse_float=_json_float,
        )
    except (json.JSONDecodeError, RecursionError) as err:
        raise BundleError(f"{PLAN_FILE}: not JSON: {err}") from None


def _shown(value: Any) -> str:
    """A JSON value as the plan writes it, cut short."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class _At:
    """A value of ``plan.json`` and its path there (``functions.f.steps[3].grid[0]``)."""

    value: Any
    path: str = ""

    def fail(self, why: str) -> BundleError:
        """The error ``plan.json: <path>: <why>``."""
        return BundleError(
            f"{PLAN_FILE}: {self.path}: {why}" if self.path else f"{PLAN_FILE}: {why}"
        )

    def expected(self, what: str) -> BundleError:
        """``must be <what>, got <value>``."""
        return self.fail(f"must be {what}, got {_shown(self.value)}")

    def item(self, index: int) -> _At:
        """The ``index``-th element of this list."""
        return _At(self.value[index], f"{self.path}[{index}]")

    def key(self, name: str) -> _At:
        """The value of key ``name`` of this object."""
        shown = f".{name}" if _NAME.fullmatch(name) else f"[{json.dumps(name)}]"
        return _At(self.value[name], f"{self.path}{shown}" if self.path else shown.lstrip("."))

    def obj(self, required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, _At]:
        """This object's values by key: exactly the keys ``required`` and some of ``optional``
        (an unknown key is an error: it could mean something this executor does not do)."""
        if not isinstance(self.value, dict):
            raise self.expected("an object")
        duplicates = getattr(self.value, "duplicates", ())
        if duplicates:
            raise self.fail(f"duplicate key {duplicates[0]!r}")
        unknown = sorted(k for k in self.value if k not in required and k not in optional)
        if unknown:
            known = ", ".join([*required, *optional])
            raise self.fail(f"unknown key {unknown[0]!r} (plan version 1 has: {known})")
        for name in required:
            if name not in self.value:
                raise self.fail(f"missing key {name!r}")
        return {k: self.key(k) for k in self.value}

    def entries(self) -> list[tuple[str, _At]]:
        """Every (key, value) of an object with keys of its own choosing."""
        if not isinstance(self.value, dict):
            raise self.expected("an object")
        duplicates = getattr(self.value, "duplicates", ())
        if duplicates:
            raise self.fail(f"duplicate key {duplicates[0]!r}")
        return [(k, self.key(k)) for k in self.value]

    def items(self, max_len: int = 1 << 20) -> list[_At]:
        """The elements of this list (at most ``max_len``)."""
        if not isinstance(self.value, list):
            raise self.expected("a list")
        if len(self.value) > max_len:
            raise self.fail(f"has {len(self.value)} elements, at most {max_len} allowed")
        return [self.item(i) for i in range(len(self.value))]

    def as_int(self, lo: int = INT64_MIN, hi: int = INT64_MAX, what: str = "an int") -> int:
        """An integer in ``[lo, hi]`` (``true`` and ``1.0`` are not integers)."""
        v = self.value
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self.expected(what)
        return v

    def index(self, table: str, size: int) -> int:
        """An index into a table of ``size`` entries (no negative indexing)."""
        return self.as_int(
            0,
            size - 1,
            f"an index into {table} (0 to {size - 1})"
            if size
            else f"an index into {table}, which is empty",
        )

    def as_str(self, pattern: re.Pattern[str] | None = None, what: str = "a string") -> str:
        """A string (matching ``pattern``)."""
        if not isinstance(self.value, str) or (pattern and not pattern.fullmatch(self.value)):
            raise self.expected(what)
        return self.value

    def choice(self, options: Sequence[str]) -> str:
        """One of ``options``."""
        if not isinstance(self.value, str) or self.value not in options:
            raise self.expected("one of " + ", ".join(repr(o) for o in options))
        return self.value

    def as_bool(self) -> bool:
        """``true`` or ``false``."""
        if not isinstance(self.value, bool):
            raise self.expected("true or false")
        return self.value


# ---------------------------------------------------------------------------------------------
# Size expressions
# ---------------------------------------------------------------------------------------------


def _fits(value: int, what: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise BundleError(f"{what} is {value}, beyond int64")
    return value


@dataclass(frozen=True)
class Dim:
    """``["dim", arg, axis]``: a dimension of an argument."""

    arg: int
    axis: int

    def value(self, shapes: Sequence[Sequence[int]]) -> int:
        """Its value for arguments of ``shapes``."""
        if self.arg >= len(shapes) or self.axis >= len(shapes[self.arg]):
            raise BundleError(f"size expression {self.raw()!r} names no argument dimension")
        return int(shapes[self.arg][self.axis])

    def raw(self) -> Expr:
        """As the plan writes it."""
        return ["dim", self.arg, self.axis]


@dataclass(frozen=True)
class BinOp:
    """``[op, a, b]`` with ``op`` in :data:`BINARY_OPS`."""

    op: str
    a: Size
    b: Size

    def value(self, shapes: Sequence[Sequence[int]]) -> int:
        """Its value for arguments of ``shapes`` (each step within int64, as on the device)."""
        a = self.a if isinstance(self.a, int) else self.a.value(shapes)
        b = self.b if isinstance(self.b, int) else self.b.value(shapes)
        return _fits(BINARY_OPS[self.op](a, b), f"size expression {show(self.raw())}")

    def raw(self) -> Expr:
        """As the plan writes it."""
        return [self.op, _raw(self.a), _raw(self.b)]


#: A validated size expression.
Size: TypeAlias = int | Dim | BinOp


def _raw(size: Size) -> Expr:
    return size if isinstance(size, int) else size.raw()


def size_value(size: Size, shapes: Sequence[Sequence[int]]) -> int:
    """The value of a validated size expression."""
    return size if isinstance(size, int) else size.value(shapes)


def _parse_size(at: _At, ranks: Sequence[int] | None) -> Size:
    """A size expression; ``["dim", i, k]`` must name a dimension of ``ranks`` (the arguments'
    ranks; ``None``: checked when evaluated)."""
    v = at.value
    if isinstance(v, int) and not isinstance(v, bool):
        return at.as_int(what="an int64")
    if not isinstance(v, list) or len(v) != 3:
        raise at.expected('a size: an int, ["dim", arg, axis] or [op, a, b]')
    op = at.item(0).choice(["dim", *BINARY_OPS])
    if op == "dim":
        if ranks is None:
            return Dim(at.item(1).as_int(0), at.item(2).as_int(0))
        arg = at.item(1).index("the function's args", len(ranks))
        return Dim(arg, at.item(2).index(f"the dimensions of args[{arg}]", ranks[arg]))
    a, b = _parse_size(at.item(1), ranks), _parse_size(at.item(2), ranks)
    if b == 0 and op in ("divu", "remu", "ceildivu"):
        raise at.item(2).fail("a size expression divides by zero")
    return BinOp(op, a, b)


def evaluate(expr: Expr, shapes: Sequence[Sequence[int]]) -> int:
    """The value of a size expression (as a plan writes it) for arguments of ``shapes``."""
    try:
        size = _parse_size(_At(expr, "expr"), None)
    except BundleError as err:
        raise BundleError(f"malformed size expression {_shown(expr)}: {err}") from None
    return size_value(size, shapes)


def show(expr: Expr) -> str:
    """A size expression as text, e.g. ``((arg0[0] * 8) + 255) divu 256``."""
    if isinstance(expr, int):
        return str(expr)
    if expr[0] == "dim":
        return f"arg{expr[1]}[{expr[2]}]"
    return f"({show(expr[1])} {expr[0]} {show(expr[2])})"


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


def _tensor_spec(at: _At) -> TensorSpec:
    keys = at.obj(["shape", "dtype"])
    dims = keys["shape"].items(MAX_RANK)
    shape = tuple(
        None if d.value is None else d.as_int(0, what="a size >= 0 or null") for d in dims
    )
    return TensorSpec(shape, keys["dtype"].choice(list(ITEMSIZE)))


def _kinds(at: _At) -> tuple[str, ...]:
    return tuple(k.choice(KINDS) for k in at.items())


class _Function:
    """Validates one function's plan, following which temporaries are live step by step."""

    def __init__(self, name: str, at: _At, counts: dict[str, int]) -> None:
        keys = at.obj(["args", "outputs", "temps", "steps"])
        self.name, self.counts = name, counts
        self.args = tuple(_tensor_spec(a) for a in keys["args"].items(4096))
        self.ranks = [len(a.shape) for a in self.args]
        outputs = keys["outputs"].as_int(0, len(self.args), f"an int from 0 to {len(self.args)}")
        temps = []
        for t in keys["temps"].items(1 << 16):
            tk = t.obj(["shape", "dtype"])
            shape = tuple(_parse_size(d, self.ranks) for d in tk["shape"].items(MAX_RANK))
            temps.append(TempSpec(shape, tk["dtype"].choice(list(ITEMSIZE))))
        self.plan = FunctionPlan(name, self.args, outputs, tuple(temps), ())
        self.live: set[int] = set()
        steps = tuple(self.step(s) for s in keys["steps"].items(1 << 20))
        self.plan = FunctionPlan(name, self.args, outputs, tuple(temps), steps)

    def buffer(self, at: _At) -> BufferRef:
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
            view = tuple(_parse_size(d, self.ranks) for d in keys["shape"].items(MAX_RANK))
        return BufferRef(kind == "temp", index, view)

    def step(self, at: _At) -> Step:
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

    def launch(self, at: _At) -> Launch:
        keys = at.obj(["op", "kernel", "grid", "block", "args"], ["shared"])
        kernel = keys["kernel"].as_str(_NAME, "a kernel name")
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
                args.append(IndexArg(_parse_size(a.obj(["index"])["index"], self.ranks)))
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

    def dim(self, at: _At, lo: int, hi: int) -> Size:
        """A grid, block or shared-memory size: a literal within ``[lo, hi]`` or an expression
        (checked when evaluated)."""
        if isinstance(at.value, list):
            return _parse_size(at, self.ranks)
        what = "a positive int" if lo == 1 else "an int >= 0"
        return at.as_int(lo, hi, f"{what} (at most {hi})")


def _fill(at: _At, dtype: str) -> int | float:
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


def _parse_abi(at: _At, functions: dict[str, FunctionPlan]) -> Abi:
    keys = at.obj(["name", "functions"], ["result_kinds", "arg_kinds", "weight_slices"])
    name = keys["name"].as_str(_NAME, "a function name")
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


def _function_abi(at: _At, plan: FunctionPlan) -> FunctionAbi:
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


def _check_training(at: _At, abi: Abi, functions: dict[str, FunctionPlan]) -> None:
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
    root = _At(value)
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
        if not _NAME.fullmatch(fname):
            raise fat.fail(f"{_shown(fname)} is not a function name")
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
