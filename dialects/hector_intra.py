"""``hector_intra``: GEMM and traversal templates with schedules (the intra-operator level).

Ops work on memrefs in destination-passing style: every template writes (or accumulates
into) its ``out`` operand and returns nothing, so buffers are explicit and the CPU and GPU
lowerings read the same program. The graph is gone at this level: a function takes its
arrays instead (``src``, ``dst``, ``etype``, ``ntype``, ``etype_ptr``, ``norm_dst_etype``,
``norm_dst``; see ``lowering/inter_to_intra.py``). Each template becomes one loop nest on the CPU
and one kernel on the GPU; its schedule attributes (``block_size``, ``tile_n``) are read by the
lowerings.
"""

from __future__ import annotations

from ._spec import Attr, DialectDef, OpDef, Operand

_IDX = "memref<?xi32>"

GEMM_TEMPLATE = OpDef(
    name="gemm_template",
    summary="Row-gathered, type-sliced matrix multiply with a store/accumulate epilogue.",
    description="""
For each row `i` in `[0, M)`:

```
r = gather_index ? gather_index[i] : i          // gathered left rows
t = weight_index ? weight_index[i] : -          // per-row weight slice (edge/node type)
o = scatter_index ? scatter_index[i] : i        // scattered output rows
out[o, :]  (=, +=, atomic +=)  a[r, :] @ (t ? weight[t] : weight)
```

`M` is the length of the first index operand present, else `a`'s row count. Optional
operands are given with `operandSegmentSizes`. The GPU lowering maps one thread to an
`(i, n-tile)` pair with `tile_n` output columns per thread, `block_size` threads per block.
""",
    operands=(
        Operand("a", "memref", "left rows `[*, K]`"),
        Operand("weight", "memref", "`[R, K, N]` (sliced) or `[K, N]` (shared)"),
        Operand("gather_index", "memref", f"`{_IDX}`: row of `a` for each `i`", "optional"),
        Operand("weight_index", "memref", f"`{_IDX}`: weight slice for each `i`", "optional"),
        Operand("scatter_index", "memref", f"`{_IDX}`: output row for each `i`", "optional"),
        Operand("out", "memref", "output rows `[*, N]`"),
    ),
    results=(),
    attributes=(
        Attr("epilogue", "enum", "how results reach `out`", ("store", "add", "atomic_add")),
        Attr("tile_n", "int", "output columns computed per thread (GPU)"),
        Attr("block_size", "int", "threads per block (GPU)"),
    ),
    example="""func.func @example(%x: memref<?x16xf32>, %w: memref<3x16x8xf32>, %src: memref<?xi32>,
                    %etype: memref<?xi32>, %out: memref<?x8xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %etype, %out)
      {epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 1>}
      : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>,
         memref<?x8xf32>) -> ()
  return
}""",
)

TRAVERSAL_TEMPLATE = OpDef(
    name="traversal_template",
    summary="Edge- or node-parallel loop fusing a row function with an optional reduction.",
    description="""
For each row `i` in `[0, M)` (an edge when `parallel = "edge"`, a node when `"node"`):

```
xi = x[gather_index ? gather_index[i] : i, :]        // optional gathered read
v  = fn(xi, y)         // copy | scale (xi * y[i, 0]) | add (xi + y[i, :])
                       // | add_bias (xi + y[:]) | relu (max(xi, 0))
reduce = "none":       out[i, :] = v
reduce = "sum":        out[scatter_index[i], :] += v          (sequential accumulation)
reduce = "atomic_sum": out[scatter_index[i], :] atomic+= v    (GPU)
```

`M` is the length of `gather_index` when present, else `x`'s row count. `scatter_index`
(the destination of each edge) is required by the reductions; `y` by `scale`, `add` and
`add_bias`. A reduction adds into `out`, which the caller zero-fills. The GPU lowering gives
one thread to each `(i, column)` element, `block_size` threads per block.
""",
    operands=(
        Operand("gather_index", "memref", f"`{_IDX}`: row of `x` read for each `i`", "optional"),
        Operand("scatter_index", "memref", f"`{_IDX}`: destination row of each `i`", "optional"),
        Operand("x", "memref", "rows `[M, D]`"),
        Operand("y", "memref", "second input of `fn`", "optional"),
        Operand("out", "memref", "output rows"),
    ),
    results=(),
    attributes=(
        Attr("parallel", "enum", "what a loop iteration stands for", ("edge", "node")),
        Attr("fn", "enum", "row function", ("copy", "scale", "add", "add_bias", "relu")),
        Attr("reduce", "enum", "how rows reach `out`", ("none", "sum", "atomic_sum")),
        Attr("block_size", "int", "threads per block (GPU)"),
    ),
    example="""func.func @example(%dst: memref<?xi32>, %m: memref<?x8xf32>, %norm: memref<?x1xf32>,
                    %out: memref<?x8xf32>) {
  "hector_intra.traversal_template"(%dst, %m, %norm, %out)
      {parallel = "edge", fn = "scale", reduce = "sum", block_size = 256 : i64,
       operandSegmentSizes = array<i32: 0, 1, 1, 1, 1>}
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
