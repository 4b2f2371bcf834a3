"""``hector_inter``: relational operators on typed graphs (the inter-operator level).

Values are ranked tensors whose leading dimension is what they are indexed by: nodes
(node-wise), edges (edge-wise) or nothing (weights). The *kind* of each value is inferred by
``hector-verify`` from the ops that produce it, so a node-wise tensor cannot be reduced as if it
were edge-wise. The graph is an SSA value of type ``!hector_inter.graph``; its edges are sorted
by edge type, and its per-type offsets and degree normalisers are built once per graph by the
runtime (``hector.graph.HeteroGraph``).
"""

from __future__ import annotations

from ._spec import Attr, DialectDef, OpDef, Operand, TypeDef

_G = Operand("graph", "hector_inter.graph", "the typed graph")


def _ex(sig: str, body: str, ret: str) -> str:
    return (
        f"func.func @example({sig}) -> {ret.split(':')[1].strip()} {{\n{body}\n  return {ret}\n}}"
    )


GATHER_SRC = OpDef(
    name="gather_src",
    summary="Copy each edge's source-node row onto the edge.",
    description="""
`out[e, :] = x[src(e), :]` for every edge `e`. Turns a node-wise tensor into an edge-wise
one. Lowering folds it into the gathered-row operand of a GEMM template whenever its only
user is a typed linear, so the edge-wise copy is never materialised.
""",
    operands=(_G, Operand("x", "tensor", "node-wise features `[N, D]`")),
    results=(Operand("out", "tensor", "edge-wise features `[E, D]`"),),
    example=_ex(
        "%g: !hector_inter.graph, %x: tensor<?x16xf32>",
        '  %0 = "hector_inter.gather_src"(%g, %x) '
        ": (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>",
        "%0 : tensor<?x16xf32>",
    ),
)

GATHER_DST = OpDef(
    name="gather_dst",
    summary="Copy each edge's destination-node row onto the edge.",
    description="""
`out[e, :] = x[dst(e), :]` for every edge `e`; the destination-side view of a node-wise
tensor (attention logits in RGAT and HGT use it).
""",
    operands=(_G, Operand("x", "tensor", "node-wise features `[N, D]`")),
    results=(Operand("out", "tensor", "edge-wise features `[E, D]`"),),
    example=_ex(
        "%g: !hector_inter.graph, %x: tensor<?x16xf32>",
        '  %0 = "hector_inter.gather_dst"(%g, %x) '
        ": (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>",
        "%0 : tensor<?x16xf32>",
    ),
)

TYPED_LINEAR = OpDef(
    name="typed_linear",
    summary="Row-wise matrix product with a weight picked by edge type, node type, or shared.",
    description="""
`out[i, :] = x[i, :] @ W[type(i)]`. With `slice = "etype"` the rows of `x` are edges and the
weight `[R, K, N]` is indexed by each edge's type; with `slice = "ntype"` the rows are nodes
and the weight `[T, K, N]` is indexed by node type; with `slice = "none"` the weight `[K, N]`
is shared by all rows, whatever they index. This is RGCN's `W_r h_j` and self-loop `W_0 h_i`.
""",
    operands=(
        _G,
        Operand("x", "tensor", "row features `[M, K]` (edge-wise or node-wise)"),
        Operand("weight", "tensor", "`[R, K, N]` when sliced, `[K, N]` when shared"),
    ),
    results=(Operand("out", "tensor", "`[M, N]`, same kind as `x`"),),
    attributes=(
        Attr("slice", "enum", "how the weight is picked per row", ("etype", "ntype", "none")),
    ),
    example=_ex(
        "%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>",
        '  %0 = "hector_inter.gather_src"(%g, %x) '
        ": (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>\n"
        '  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "etype"} '
        ": (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>",
        "%1 : tensor<?x8xf32>",
    ),
)

DEGREE_NORM = OpDef(
    name="degree_norm",
    summary="Per-edge normaliser `1 / c`, from the graph's in-degree counts.",
    description="""
With `by = "dst_etype"`, `out[e, 0] = 1 / |{e' : dst(e') = dst(e), etype(e') = etype(e)}|`,
RGCN's `1 / c_{i,r}` (PyG's per-relation mean). With `by = "dst"`, the count is over all
incoming edges of `dst(e)`. The counts are graph structure: the runtime computes them once per
graph, so this op reads a cached array and does no work at run time.
""",
    operands=(_G,),
    results=(Operand("out", "tensor", "edge-wise `[E, 1]`"),),
    attributes=(Attr("by", "enum", "which incoming edges are counted", ("dst_etype", "dst")),),
    example=_ex(
        "%g: !hector_inter.graph",
        '  %0 = "hector_inter.degree_norm"(%g) {by = "dst_etype"} '
        ": (!hector_inter.graph) -> tensor<?x1xf32>",
        "%0 : tensor<?x1xf32>",
    ),
)

SCALE = OpDef(
    name="scale",
    summary="Multiply each row by a per-row scalar.",
    description="""
`out[i, :] = x[i, :] * s[i, 0]`. Both operands index the same rows (edges or nodes). Used for
degree normalisation and, later, for attention weights.
""",
    operands=(
        Operand("x", "tensor", "rows `[M, D]`"),
        Operand("s", "tensor", "per-row scalars `[M, 1]`"),
    ),
    results=(Operand("out", "tensor", "`[M, D]`"),),
    example=_ex(
        "%x: tensor<?x8xf32>, %s: tensor<?x1xf32>",
        '  %0 = "hector_inter.scale"(%x, %s) '
        ": (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>",
        "%0 : tensor<?x8xf32>",
    ),
)

SUM_TO_DST = OpDef(
    name="sum_to_dst",
    summary="Sum edge rows onto their destination nodes.",
    description="""
`out[v, :] = Σ_{e : dst(e) = v} x[e, :]`; nodes with no incoming edge get zeros. The
reduction of message passing; lowered to an edge-parallel traversal template that accumulates
into destination rows (atomically on the GPU).
""",
    operands=(_G, Operand("x", "tensor", "edge-wise rows `[E, D]`")),
    results=(Operand("out", "tensor", "node-wise rows `[N, D]`"),),
    example=_ex(
        "%g: !hector_inter.graph, %x: tensor<?x8xf32>",
        '  %0 = "hector_inter.sum_to_dst"(%g, %x) '
        ": (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>",
        "%0 : tensor<?x8xf32>",
    ),
)

ADD = OpDef(
    name="add",
    summary="Elementwise sum of two row tensors, or of a row tensor and a bias vector.",
    description="""
`out = lhs + rhs` where both are `[M, D]` of the same kind, or `rhs` is a weight-kind bias of
shape `[D]` added to every row.
""",
    operands=(
        Operand("lhs", "tensor", "rows `[M, D]`"),
        Operand("rhs", "tensor", "rows `[M, D]` or bias `[D]`"),
    ),
    results=(Operand("out", "tensor", "`[M, D]`"),),
    example=_ex(
        "%a: tensor<?x8xf32>, %b: tensor<8xf32>",
        '  %0 = "hector_inter.add"(%a, %b) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>',
        "%0 : tensor<?x8xf32>",
    ),
)

UNARY = OpDef(
    name="unary",
    summary="An elementwise unary function.",
    description="""
`out = fn(x)` elementwise. `fn = "relu"` is RGCN's activation; `"copy"` is the identity.
""",
    operands=(Operand("x", "tensor", "any rows `[M, D]`"),),
    results=(Operand("out", "tensor", "`[M, D]`, same kind as `x`"),),
    attributes=(Attr("fn", "enum", "the function applied", ("relu", "copy")),),
    example=_ex(
        "%x: tensor<?x8xf32>",
        '  %0 = "hector_inter.unary"(%x) {fn = "relu"} : (tensor<?x8xf32>) -> tensor<?x8xf32>',
        "%0 : tensor<?x8xf32>",
    ),
)

DIALECT = DialectDef(
    name="hector_inter",
    summary="Relational operators on typed graphs: Hector's inter-operator level.",
    description=__doc__ or "",
    types=(
        TypeDef(
            "graph",
            "A heterogeneous graph: COO edges sorted by edge type, per-type offsets, node "
            "types and cached degree counts. At the intra level it becomes those arrays.",
        ),
    ),
    ops=(GATHER_SRC, GATHER_DST, TYPED_LINEAR, DEGREE_NORM, SCALE, SUM_TO_DST, ADD, UNARY),
)
