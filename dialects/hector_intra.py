"""``hector_intra``: GEMM and traversal templates with schedules (the intra-operator level).

Ops work on memrefs in destination-passing style: every template writes (or accumulates
into) its ``out`` operand and returns nothing, so buffers are explicit and the CPU and GPU
lowerings read the same program. The graph is gone at this level: a function takes its arrays
instead, in the order of ``GRAPH_LAYOUT`` in ``dialects/hector_intra.py`` (their one
definition; the runtime's ``HeteroGraph.arrays()`` passes them in that order). Each template
becomes one loop nest on the CPU and one kernel on the GPU; its schedule attributes
(``block_size``, ``tile_n``) are read by the lowerings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .builders import OpAccess, builders
from .builders import view as _view
from .hector_inter import UNARY_FUNCTIONS
from .spec import Attr, DialectDef, OpDef, Operand

_IDX = "memref<?xi32>"


@dataclass(frozen=True)
class GraphArray:
    """One array of the graph as compiled functions take it: ``[?]`` i32, or ``[?, 1]`` f32."""

    name: str
    dtype: str  # "i32" | "f32"
    doc: str

    @property
    def memref(self) -> str:
        """The array's memref type, as printed (``memref<?xi32>``, ``memref<?x1xf32>``)."""
        return "memref<?xi32>" if self.dtype == "i32" else "memref<?x1xf32>"

    def memref_type(self) -> Any:
        """The array's memref type in the current MLIR context: ``[?]`` i32 or ``[?, 1]`` f32."""
        from mlir import ir

        dyn = ir.ShapedType.get_dynamic_size()
        if self.dtype == "i32":
            return ir.MemRefType.get([dyn], ir.IntegerType.get_signless(32))
        return ir.MemRefType.get([dyn, 1], ir.F32Type.get())


#: The graph's arrays, in the order compiled functions take them in place of the
#: ``!hector_inter.graph`` argument.
GRAPH_LAYOUT: tuple[GraphArray, ...] = (
    GraphArray("src", "i32", "source node of each edge (edges sorted by type)"),
    GraphArray("dst", "i32", "destination node of each edge"),
    GraphArray("etype", "i32", "edge type of each edge"),
    GraphArray("ntype", "i32", "node type of each node (its length is the node count)"),
    GraphArray("etype_ptr", "i32", "first edge of each edge type, and the edge count last"),
    GraphArray("norm_dst_etype", "f32", "1 / in-degree per (destination, edge type)"),
    GraphArray("norm_dst", "f32", "1 / in-degree per destination"),
    GraphArray("compact_src", "i32", "source node of each unique (source, edge type) pair"),
    GraphArray("compact_etype", "i32", "edge type of each unique pair"),
    GraphArray("edge_compact", "i32", "unique pair of each edge"),
    GraphArray("etype_src_ntype", "i32", "source node type of each edge type"),
    # Unique (destination, edge type) pairs, sorted by (edge type, destination): each
    # relation's pairs are one contiguous segment, in the relations' order.
    GraphArray("dst_compact_dst", "i32", "destination node of each unique (dst, edge type) pair"),
    GraphArray("dst_compact_etype", "i32", "edge type of each unique (dst, edge type) pair"),
    GraphArray("edge_dst_compact", "i32", "unique (dst, edge type) pair of each edge"),
)
#: Loops a schedule may run in parallel (``Schedule.parallel``).
PARALLEL_LOOPS: tuple[str, ...] = ("rows", "none")


#: The largest value of each integer field of a schedule: tiles become static buffer extents,
#: ``vector`` and ``unroll`` registers the lowerings unroll over, ``threads`` workers whose
#: partial outputs are combined one by one.
SCHEDULE_MAX = {
    "tile_m": 1 << 16,
    "tile_n": 1 << 16,
    "tile_k": 1 << 16,
    "vector": 1024,
    "unroll": 1024,
    "threads": 1024,
}


@dataclass(frozen=True)
class Schedule:
    """How a template's loops are tiled, packed, vectorised and parallelised: the optional
    ``schedule`` dictionary attribute of both templates (IRDL declares no optional attributes,
    so the lowerings and ``hector-verify`` read it; ``hector-schedule`` chooses it per shape).

    The meaning is the same on both back ends; each reads the fields it uses.

    * ``tile_m`` — rows per tile. CPU: rows packed into one contiguous tile (gathered rows
      copied in) and multiplied together; GPU: rows per thread block, staged in shared memory.
    * ``tile_n`` — output columns per tile (CPU register block width; GPU columns per block).
    * ``tile_k`` — reduction depth per step (GPU: columns of ``a`` staged per shared-memory
      step; CPU: steps per reduction block of an f32 ``xw`` multiplying by weight panels, the
      accumulators stored and reloaded between blocks; 0 or 1, the micro-kernel's own step,
      keep the reduction whole).
    * ``vector`` — f32 lanes of the CPU micro-kernel's vectors (1: scalar code).
    * ``unroll`` — rows of ``out`` held in registers at once by the CPU micro-kernel.
    * ``pack`` — gather rows into a contiguous tile before multiplying (else read in place).
    * ``parallel`` — ``"rows"``: row tiles spread over ``threads`` workers; where their rows
      may meet in one output row, each owns a share of the output rows or reduces into its
      own partial output, summed in a fixed order (``reduction_split``), so results are
      identical run to run; ``"none"``: one thread.
    * ``threads`` — CPU workers (``torch.get_num_threads()`` when compiled).
    * ``products`` — how a CPU GEMM's packed tiles multiply: ``"f32"`` (operands widened to
      f32, FMAs) or ``"bf16"`` (operands rounded to bf16 and packed in pairs, AVX512-BF16's
      pair dot product into f32 accumulators; ``hector-schedule{bf16_dot=true}`` chooses it
      where an operand, or an argument of the function, is stored in bf16). The GPU ignores
      it.
    * ``panels`` — a packed CPU ``xw`` of f32 products multiplies by its weight packed once per
      call in column panels ``[N / tile_n, K, tile_n]``, panel by panel (``hector-schedule``
      chooses it where a weight row fills a page or more: 1024 f32 columns). Printed only when
      set. The GPU ignores it.
    * ``in_place`` — a packed CPU ``xw`` of f32 products whose rows of ``a`` are f32 and not
      gathered multiplies each whole tile of them where they lie, without copying them into a
      packed tile, its own rows of ``out`` prefetched for writing; a tile cut short (the last
      rows, a weight slice's run ending inside it) is packed as before (``hector-schedule``
      chooses it for small reductions). Printed only when set. The GPU ignores it.
    """

    tile_m: int = 1
    tile_n: int = 0  # 0: the whole row
    tile_k: int = 0  # 0: the whole reduction
    vector: int = 1
    unroll: int = 1
    pack: bool = False
    parallel: str = "none"
    threads: int = 1
    products: str = "f32"
    panels: bool = False
    in_place: bool = False

    FIELDS = (
        "tile_m",
        "tile_n",
        "tile_k",
        "vector",
        "unroll",
        "pack",
        "parallel",
        "threads",
        "products",
        "panels",
        "in_place",
    )
    #: Fields holding a bool.
    FLAGS = ("pack", "panels", "in_place")
    #: Fields holding a string, with the values each takes.
    CHOICES = {"parallel": PARALLEL_LOOPS, "products": ("f32", "bf16")}

    def __post_init__(self) -> None:
        ints = {
            f: getattr(self, f)
            for f in self.FIELDS
            if f not in self.FLAGS and f not in self.CHOICES
        }
        for name, v in ints.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if "tile_" in name else 1):
                raise ValueError(f"schedule field {name} must be a positive integer, got {v!r}")
            if v > SCHEDULE_MAX[name]:
                # The lowerings build buffers of these extents and unroll over some of them.
                raise ValueError(
                    f"schedule field {name} must be at most {SCHEDULE_MAX[name]}, got {v}"
                )
        if self.tile_m < 1:
            raise ValueError(f"schedule field tile_m must be at least 1, got {self.tile_m}")
        for name, known in self.CHOICES.items():
            if getattr(self, name) not in known:
                raise ValueError(
                    f"schedule field {name} must be one of {', '.join(known)}, "
                    f"got {getattr(self, name)!r}"
                )

    def to_attr(self) -> Any:
        """The schedule as a ``DictionaryAttr`` in the current MLIR context."""
        from mlir import ir

        i64 = ir.IntegerType.get_signless(64)
        values: dict[str, Any] = {}
        for f in self.FIELDS:
            v = getattr(self, f)
            if (f, v) in (("products", "f32"), ("panels", False), ("in_place", False)):
                continue  # defaults, left out so schedules print as they always did
            if isinstance(v, bool):
                values[f] = ir.BoolAttr.get(v)
            elif isinstance(v, int):
                values[f] = ir.IntegerAttr.get(i64, v)
            else:
                values[f] = ir.StringAttr.get(v)
        return ir.DictAttr.get(values)

    @classmethod
    def from_attr(cls, attr: Any) -> Schedule:
        """Read a ``schedule`` dictionary attribute; unknown keys or wrong kinds raise
        ``ValueError`` naming the field."""
        from mlir import ir

        d = ir.DictAttr(attr)
        fields: dict[str, Any] = {}
        for i in range(len(d)):
            named = d[i]
            name, value = named.name, named.attr
            if name not in cls.FIELDS:
                raise ValueError(
                    f"unknown schedule field '{name}' (known: {', '.join(cls.FIELDS)})"
                )
            if name in cls.FLAGS:
                if not isinstance(value, ir.BoolAttr):
                    raise ValueError(f"schedule field {name} must be a bool, got {value}")
                fields[name] = ir.BoolAttr(value).value
            elif name in cls.CHOICES:
                if not isinstance(value, ir.StringAttr):
                    raise ValueError(f"schedule field {name} must be a string, got {value}")
                fields[name] = ir.StringAttr(value).value
            else:
                if not isinstance(value, ir.IntegerAttr) or isinstance(value, ir.BoolAttr):
                    raise ValueError(f"schedule field {name} must be an integer, got {value}")
                fields[name] = ir.IntegerAttr(value).value
        return cls(**fields)


def schedule_of(op: Any) -> Schedule | None:
    """A template's ``schedule`` attribute, or None when it has none (the lowerings then use
    the plain one-row-at-a-time form)."""
    attrs = op.operation.attributes if hasattr(op, "operation") else op.attributes
    if "schedule" not in attrs:
        return None
    return Schedule.from_attr(attrs["schedule"])


#: Values of the traversal template's optional ``align`` attribute (see its description).
ALIGN_MODES: tuple[str, ...] = ("none", "warp128")

#: Their names alone.
GRAPH_ARRAYS: tuple[str, ...] = tuple(a.name for a in GRAPH_LAYOUT)

# Row functions of the traversal template; their element semantics live in
# lowering/templates.py (shared by the CPU and GPU back ends). The unary ones and their
# gradients come from hector_inter's declarations.
UNARY_FNS = tuple(f.name for f in UNARY_FUNCTIONS if f.name != "copy")
BINARY_FNS = ("scale", "add", "add_bias", "mul", "sub", "div", "exp_sub", "eq", "dot")
GRAD_FNS = tuple(f"{f.name}_grad" for f in UNARY_FUNCTIONS if f.grad_ref != "none")


def _names(fns: tuple[str, ...]) -> str:
    return ", ".join(f"`{f}`" for f in fns)


def _grads(ref: str) -> tuple[str, ...]:
    return tuple(f"{f.name}_grad" for f in UNARY_FUNCTIONS if f.grad_ref == ref)


TRAVERSAL_FNS = ("copy", *UNARY_FNS, *BINARY_FNS, *GRAD_FNS)

GEMM_TEMPLATE = OpDef(
    name="gemm_template",
    summary="Row-gathered, type-sliced matrix multiply with a store/accumulate epilogue.",
    description="""
For each row `i` in `[0, M)`, with `variant = "xw"` (the forward product):

```
r = gather_index ? gather_index[i] : i          // gathered left rows
t = weight_index ? weight_index[i] : -          // per-row weight slice (edge/node type)
o = scatter_index ? scatter_index[i] : i        // scattered output rows
out[o, :]  (=, +=, atomic +=)  s * (a[r, :] @ (t ? weight[t] : weight))
                                   // s = row_scale ? row_scale[i, 0] : 1
```

With a `scatter_index` and a `row_scale` this is a whole message-passing step in one kernel:
RGCN's `Σ_{e → v} (1/c_e) x[src(e)] W[etype(e)]` reads gathered rows, multiplies, scales and
accumulates into destination rows without any per-edge intermediate.

`variant = "xwt"` multiplies by the transposed slice, `a[r, :] @ weight[t]^T` (input
gradients); `variant = "xty"` accumulates outer products into a weight-shaped output,
`out[t] += a[r, :]^T ⊗ (s * weight[o, :])` (weight gradients: here `weight` holds the row
gradients, `out` is `[R, K, N]` or `[K, N]`, zero-filled by the caller, and `epilogue` must be
`add`). In an `xty` the `scatter_index` says which gradient row row `i` reads — the row the
forward product `xw` with the same indices wrote — so the gradient of a scatter-GEMM is read in
place, never gathered into a per-row copy first.

An optional `slice_rows = K : i64` (instead of a `weight_index`) gives row `i` the weight
slice `i / K`: per-slice weight products (`out[r] = a[r] @ w[r]` over `a`'s rows `[R*K, N]`),
which HGT's chained-linear fold computes once per relation.

`M` is the length of the first index operand present (`gather_index`, `weight_index`), else
`a`'s row count. Optional
operands are given with `operandSegmentSizes`. The GPU lowering maps one thread to an
`(i, n-tile)` pair with `tile_n` output columns per thread, `block_size` threads per block.

Optional attribute `schedule` (a dictionary, `hector_intra.Schedule`; chosen per shape by
`hector-schedule`): tiles of `tile_m` rows, packed when `pack` (gathered rows copied into a
contiguous tile), multiplied by a vectorised micro-kernel (`unroll` rows × `vector` lanes on
the CPU), row tiles spread over `threads` workers when `parallel = "rows"`. Without it the
lowerings use the plain one-row-at-a-time form above.
""",
    operands=(
        Operand("a", "memref", "left rows `[*, K]`: f32, or f16 / bf16 extended to f32 on load"),
        Operand(
            "weight",
            "memref",
            "`[R, K, N]` (sliced) or `[K, N]` (shared): f32, f16 or bf16 (the CPU copies a half "
            "weight to f32 once per call; the GPU extends each element on load)",
        ),
        Operand("gather_index", "memref", f"`{_IDX}`: row of `a` for each `i`", "optional"),
        Operand("weight_index", "memref", f"`{_IDX}`: weight slice for each `i`", "optional"),
        Operand(
            "scatter_index",
            "memref",
            f"`{_IDX}`: output row for each `i` (`xty`: gradient row read)",
            "optional",
        ),
        Operand("row_scale", "memref", "`memref<?x1xf32>`: a factor for each `i`", "optional"),
        Operand(
            "out",
            "memref",
            'output rows `[*, N]`, f32; an `xw` product with `epilogue = "store"` may write '
            "f16 / bf16, each f32 element rounded to the nearest even as it is written",
        ),
    ),
    results=(),
    attributes=(
        Attr("variant", "enum", "which product", ("xw", "xwt", "xty")),
        Attr("epilogue", "enum", "how results reach `out`", ("store", "add", "atomic_add")),
        Attr("tile_n", "int", "output columns computed per thread (GPU)"),
        Attr("block_size", "int", "threads per block (GPU)"),
    ),
    example="""func.func @example(%x: memref<?x16xf32>, %w: memref<3x16x8xf32>, %src: memref<?xi32>,
                    %etype: memref<?xi32>, %out: memref<?x8xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %etype, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>}
      : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>,
         memref<?x8xf32>) -> ()
  return
}""",
)

TRAVERSAL_TEMPLATE = OpDef(
    name="traversal_template",
    summary="Edge- or node-parallel loop fusing a row function with an optional reduction.",
    description=f"""
For each row `i` in `[0, M)` (an edge when `parallel = "edge"`, a node when `"node"`) and
each output column `j`:

```
xr = gather_index ? gather_index[i] : i             // optional gathered read of x
yr = y_index ? y_index[i] : i                       // optional gathered read of y
v  = fn(x[xr, :], y[yr, :])[j]
reduce = "none":       out[i, j] = v
reduce = "sum":        out[scatter_index[i], j] += v   (out[j] += v without scatter_index)
reduce = "atomic_sum": as "sum", atomically (GPU)
reduce = "max":        out[scatter_index[i], j] = max(out[…], v)
```

Row functions (`Dx`, `Dy`, `Do` are the widths of x, y, out):

| fn | `v[j]` |
|---|---|
| `copy` | `x[j]` |
| `scale` | `x[j] * y[j / (Dx / Dy)]` (per-head scale) |
| `add`, `add_bias` | `x[j] + y[j]` (`add_bias`: `y` is a vector, read without a row) |
| `mul`, `sub`, `div` | `x[j] * y[j]`, `x[j] - y[j]`, `x[j] / y[j]` |
| `exp_sub` | `exp(x[j] - y[j])` (softmax numerator) |
| `eq` | `1` where `x[j] == y[j]`, else `0` (which edges hold their group's maximum) |
| `dot` | `Σ_{{d < Dx/Do}} x[j*Dh + d] * y[j*Dh + d]` (per-head inner product) |
| {_names(UNARY_FNS)} | unary functions of `x` (`hector_inter.unary`) |
| {_names(_grads("input"))} | `x[j] * f'(y[j])` (`x` = dy, `y` = forward input) |
| {_names(_grads("output"))} | `x[j] * f'(…)` from `y` = forward output |

`M` is the length of `gather_index` when present, else `x`'s row count. A sum reduction adds
into `out`, which the caller zero-fills; a max reduction expects `out` filled with `-inf`. The
GPU lowering gives one thread to each `(i, column)` element, `block_size` threads per block,
and makes reductions atomic.

Optional attribute `align` (`"none"` by default; IRDL cannot declare optional attributes, so
the GPU lowering checks it): `"warp128"` gives one warp to each row instead, reading `x[xr, :]`
in 128-byte-aligned segments (lane `l` of step `k` reads column `32k + l - s`, `s` being the
row's misalignment in floats), which cuts PCIe requests when `x` is a unified tensor read
zero-copy (`hector_bench.request_model`). It needs `x` and `out` of the same width and a
`block_size` that is a multiple of 32; the CPU lowering ignores it.

Optional attribute `schedule` (`hector_intra.Schedule`, as on `gemm_template`): on the CPU,
`parallel = "rows"` spreads rows over `threads` workers (a reduction with a `scatter_index` into
rows of 8 or more columns gives each worker a share of the output rows; narrower ones reduce
into per-worker partial outputs summed in a fixed order) and `vector` vectorises the column
loop.
""",
    operands=(
        Operand("gather_index", "memref", f"`{_IDX}`: row of `x` read for each `i`", "optional"),
        Operand("scatter_index", "memref", f"`{_IDX}`: destination row of each `i`", "optional"),
        Operand("y_index", "memref", f"`{_IDX}`: row of `y` read for each `i`", "optional"),
        Operand("x", "memref", "rows `[M, D]`: f32, or f16 / bf16 extended to f32 on load"),
        Operand("y", "memref", "second input of `fn` (f32, f16 or bf16)", "optional"),
        Operand(
            "out",
            "memref",
            'output rows, f32; with `reduce = "none"` also f16 / bf16, each f32 element '
            "rounded to the nearest even as it is written",
        ),
    ),
    results=(),
    attributes=(
        Attr("parallel", "enum", "what a loop iteration stands for", ("edge", "node")),
        Attr("fn", "enum", "row function (table above)", TRAVERSAL_FNS),
        Attr("reduce", "enum", "how rows reach `out`", ("none", "sum", "atomic_sum", "max")),
        Attr("slope", "float", "negative slope of `leaky_relu` / `leaky_relu_grad`"),
        Attr("block_size", "int", "threads per block (GPU)"),
    ),
    example="""func.func @example(%dst: memref<?xi32>, %m: memref<?x8xf32>, %norm: memref<?x1xf32>,
                    %out: memref<?x8xf32>) {
  "hector_intra.traversal_template"(%dst, %m, %norm, %out)
      {parallel = "edge", fn = "scale", reduce = "sum", slope = 0.0 : f32,
       block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 1, 1>}
      : (memref<?xi32>, memref<?x8xf32>, memref<?x1xf32>, memref<?x8xf32>) -> ()
  return
}""",
)

DIALECT = DialectDef(
    name="hector_intra",
    summary="GEMM and traversal templates with schedules: Hector's intra-operator level.",
    description=__doc__ or "",
    ops=(GEMM_TEMPLATE, TRAVERSAL_TEMPLATE),
)

#: Typed builders, one per op (``OPS.<op>(operand=..., attr=..., result=type, loc=loc)``).
OPS = builders(DIALECT)


def view(op: Any) -> OpAccess:
    """Operands and attributes of one of this dialect's ops, by their spec names."""
    return _view(DIALECT, op)


#: A reducing traversal runs on its CPU workers only when it has at least this many rows per
#: row of ``out``: below it, filling and folding the workers' partial outputs (memory-bound,
#: like the traversal itself) costs more than the second worker saves. Checked at run time.
PARTIAL_ROWS_RATIO = 4


def worker_threads(v: OpAccess, schedule: Schedule) -> int:
    """CPU workers a scheduled template runs on: ``schedule.threads`` with ``parallel = "rows"``,
    except a GEMM that scatters with a ``store`` epilogue (the last writer wins, so the rows keep
    their sequential order on one worker)."""
    if schedule.parallel != "rows":
        return 1
    if v.spec.name == GEMM_TEMPLATE.name and v.has("scatter_index"):
        if v.attr("epilogue") == "store":
            return 1
    return schedule.threads


#: Unit attribute of a sum (``reduce = "sum"`` with a ``scatter_index``) that the CPU builds as a
#: segmented sum: its rows grouped by output row (a stable counting sort), each output row
#: summed in an f32 scratch row and written once, so ``out`` needs no fill and may be stored in
#: f16 or bf16 (rounded once). Set by ``hector-half-messages``; only the CPU back end builds it.
SEGMENTED_SUM = "hector.segmented_sum"


#: Unit attribute of a per-head dot (``fn = "dot"``, ``reduce = "none"``) that the CPU builds
#: with vector partial sums, reassociating each head's sum. Set by ``hector-half-messages``
#: (half-precision inference programs); only the CPU back end builds it.
VECTOR_DOT = "hector.vector_dot"


#: A reducing traversal whose output rows are at least this wide splits its *output* rows
#: among the CPU workers ("owners"): each worker reads every row's ``scatter_index`` and
#: reduces only the rows landing in its share, so no partial copies of ``out`` exist and each
#: output row is reduced in row order, as on one worker. Narrower outputs use partials: the
#: extra index reads would cost as much as the rows themselves.
OWNED_MIN_WIDTH = 8


def reduction_split(v: OpAccess, schedule: Schedule) -> str:
    """How the CPU workers of a scheduled template share rows that may meet in one output row.

    * ``"none"`` — one worker, or rows that never meet;
    * ``"owners"`` — a reducing traversal with a ``scatter_index`` into rows of at least
      ``OWNED_MIN_WIDTH`` columns: each worker owns a range of output rows;
    * ``"slices"`` — a weight gradient (``xty``) per weight slice: with rows sorted by slice
      (``slice_rows`` always; a ``weight_index`` checked at run time, else ``"partials"``) a
      worker adds every slice straight into ``out`` but its first, the only one an earlier
      worker may share, which it sums in a ``[K, N]`` buffer of its own, added in worker order;
    * ``"partials"`` — a private copy of ``out`` per worker after the first, folded in worker
      order: other scattering or weight-gradient GEMMs that accumulate, and narrow reductions.
    """
    if worker_threads(v, schedule) == 1:
        return "none"
    if v.spec.name == GEMM_TEMPLATE.name:
        accumulates = v.attr("epilogue") != "store"
        xty = v.attr("variant") == "xty"
        if not (accumulates and (xty or v.has("scatter_index"))):
            return "none"
        sliced = v.has("weight_index") or "slice_rows" in v.op.attributes
        return "slices" if xty and sliced else "partials"
    if v.attr("reduce") == "none":
        return "none"
    from mlir import ir

    width = 1
    for d in ir.MemRefType(v.operand("out").type).shape[1:]:
        width *= d
    return "owners" if v.has("scatter_index") and width >= OWNED_MIN_WIDTH else "partials"


def worker_partials(v: OpAccess, schedule: Schedule) -> float:
    """The bytes the CPU workers of a scheduled template write besides ``out``, in copies of
    ``out``: ``threads - 1`` with ``"partials"`` (``reduction_split``); with ``"slices"``,
    ``threads - 1`` slices of ``out`` under ``slice_rows`` (a ``weight_index`` may fall back to
    partials at run time: counted as partials); else 0. A reducing traversal allocates its
    partials only with ``PARTIAL_ROWS_RATIO`` rows per output row."""
    split = reduction_split(v, schedule)
    copies = worker_threads(v, schedule) - 1
    if split == "slices" and not v.has("weight_index"):
        from mlir import ir

        return copies / ir.MemRefType(v.operand("out").type).shape[0]
    return float(copies) if split in ("partials", "slices") else 0.0
