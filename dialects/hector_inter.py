"""``hector_inter``: relational operators on typed graphs (the inter-operator level).

Values are ranked tensors whose leading dimension is what they are indexed by: nodes
(node-wise), edges (edge-wise) or nothing (weights). The *kind* of each value is inferred by
``hector-verify`` from the ops that produce it, so a node-wise tensor cannot be reduced as if it
were edge-wise. The graph is an SSA value of type ``!hector_inter.graph``; its edges are sorted
by edge type, and its per-type offsets and degree normalisers are built once per graph by the
runtime (``hector.data.graph.HeteroGraph``).

Values are f32. A function's tensor argument may carry ``{hector.storage = bf16}`` (or ``f16``):
its caller passes it in that type, and the function computes on its values extended to f32.
``convert-hector-inter-to-intra`` gives the argument that element type; the templates that
read it convert on load. ``hector-autodiff`` keeps the attribute on ``@f_train`` and
``@f_backward``. An argument stored in a half type may only be read by templates (an f32 byte
copy of it is an error at the op that would make it). A ``[rows, width]`` result may carry the
attribute too (``res_attrs``): the caller takes it in that type. Its value is computed in f32
as ever, then rounded to the nearest even by one traversal writing the output, so no
reduction accumulates in a half type.
"""

from __future__ import annotations

from typing import Any

from .builders import OpAccess, builders
from .builders import view as _view
from .spec import Attr, DialectDef, Kind, OpDef, Operand, RowMap, TypeDef, UnaryFn

_G = Operand("graph", "hector_inter.graph", "the typed graph")

#: Argument (or result) attribute of a function's tensor argument (result): the element type
#: (``f16``, ``bf16``; ``f32`` is the default) its caller stores it in. The function computes
#: on f32 values; ``convert-hector-inter-to-intra`` gives the argument that element type and
#: the templates that read it extend each element to f32 on load (``hector-autodiff`` keeps it
#: on ``@f_train`` and ``@f_backward``); a result is rounded once, as it is written.
STORAGE = "hector.storage"

#: The elementwise functions of ``unary`` / ``unary_grad``, declared once (see ``UnaryFn``).
UNARY_FUNCTIONS: tuple[UnaryFn, ...] = (
    UnaryFn("relu", "`max(x, 0)`", "input", "torch.aten.relu"),
    UnaryFn("copy", "`x` (the identity)", "none", traced=False),
    UnaryFn("leaky_relu", "`x if x > 0 else slope * x`", "input", "torch.aten.leaky_relu"),
    UnaryFn("exp", "`exp(x)`", "output", "torch.aten.exp"),
    UnaryFn("tanh", "`tanh(x)`", "output", "torch.aten.tanh"),
    UnaryFn("sigmoid", "`1 / (1 + exp(-x))`", "output", "torch.aten.sigmoid"),
    UnaryFn("gelu", "exact GELU `x/2 * (1 + erf(x/sqrt(2)))`", "input", "torch.aten.gelu"),
    UnaryFn("neg", "`-x`", "none", "torch.aten.neg", traced=False),
    UnaryFn("silu", "`x * sigmoid(x)` (SiLU, swish)", "input", "torch.aten.silu"),
    UnaryFn(
        "shift_positive",
        "`x + 1 if x > 0 else x` (RGAT's f-additive attention; derivative 1)",
        "none",
    ),
)
UNARY_FNS = tuple(f.name for f in UNARY_FUNCTIONS)


def unary_fn(name: str) -> UnaryFn:
    """The declaration of the unary function ``name``."""
    for f in UNARY_FUNCTIONS:
        if f.name == name:
            return f
    raise KeyError(name)


def _unary_table() -> str:
    rows = ["| fn | computes | derivative written in |", "|---|---|---|"]
    rows += [f"| `{f.name}` | {f.formula} | {f.grad_ref} |" for f in UNARY_FUNCTIONS]
    return "\n".join(rows)


def _ex(sig: str, body: str, ret: str) -> str:
    return (
        f"func.func @example({sig}) -> {ret.split(':')[1].strip()} {{\n{body}\n  return {ret}\n}}"
    )


GATHER_SRC = OpDef(
    name="gather_src",
    rowmap=RowMap("src", reduce=False, src=Kind.NODE, dst=Kind.EDGE),
    adjoint="sum_to_src",
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
    rowmap=RowMap("dst", reduce=False, src=Kind.NODE, dst=Kind.EDGE),
    adjoint="sum_to_dst",
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
    result_kind=Kind.EDGE,
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
    summary="Multiply each row (or each head's slice of it) by a per-row scalar.",
    description="""
`out[i, h*Dh + d] = x[i, h*Dh + d] * s[i, h]` with `s` of shape `[M, H]`, `Dh = D / H`: with
`H = 1` every column of a row is scaled by one number (degree normalisation); with `H` heads each
head's slice is scaled by its own attention weight (RGAT, HGT). Both operands index the same
rows (edges or nodes).
""",
    operands=(
        Operand("x", "tensor", "rows `[M, D]`"),
        Operand("s", "tensor", "per-row, per-head scalars `[M, H]`, `H` divides `D`"),
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
    rowmap=RowMap("dst", reduce=True, src=Kind.EDGE, dst=Kind.NODE, rows="ntype"),
    adjoint="gather_dst",
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
shape `[D]` added to every row, or a typed bias `[T, D]` whose row is picked by each row's type
(node type for node-wise rows, edge type for edge-wise rows; HGT's per-node-type projections).
The typed form takes the graph as an optional third operand.
""",
    operands=(
        Operand("lhs", "tensor", "rows `[M, D]`"),
        Operand("rhs", "tensor", "rows `[M, D]`, bias `[D]` or typed bias `[T, D]`"),
        Operand("graph", "hector_inter.graph", "the graph (typed bias only)", "optional"),
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
    description=f"""
`out = fn(x)` elementwise. `relu` is RGCN's activation, `leaky_relu` (negative slope `slope`)
RGAT's attention nonlinearity, `gelu` HGT's. `slope` is read by `leaky_relu` only.

{_unary_table()}
""",
    operands=(Operand("x", "tensor", "any rows `[M, D]`"),),
    results=(Operand("out", "tensor", "`[M, D]`, same kind as `x`"),),
    attributes=(
        Attr("fn", "enum", "the function applied", UNARY_FNS),
        Attr("slope", "float", "negative slope of `leaky_relu` (ignored by the others)"),
    ),
    example=_ex(
        "%x: tensor<?x8xf32>",
        '  %0 = "hector_inter.unary"(%x) {fn = "leaky_relu", slope = 2.0e-01 : f32} '
        ": (tensor<?x8xf32>) -> tensor<?x8xf32>",
        "%0 : tensor<?x8xf32>",
    ),
)

SUM_TO_SRC = OpDef(
    name="sum_to_src",
    rowmap=RowMap("src", reduce=True, src=Kind.EDGE, dst=Kind.NODE, rows="ntype"),
    adjoint="gather_src",
    summary="Sum edge rows onto their source nodes.",
    description="""
`out[u, :] = Σ_{e : src(e) = u} x[e, :]`; the adjoint of `gather_src` (autodiff emits it for the
gradient of source-node features).
""",
    operands=(_G, Operand("x", "tensor", "edge-wise rows `[E, D]`")),
    results=(Operand("out", "tensor", "node-wise rows `[N, D]`"),),
    example=_ex(
        "%g: !hector_inter.graph, %x: tensor<?x8xf32>",
        '  %0 = "hector_inter.sum_to_src"(%g, %x) '
        ": (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>",
        "%0 : tensor<?x8xf32>",
    ),
)

TYPED_LINEAR_T = OpDef(
    name="typed_linear_transposed",
    summary="Row-wise product with the transposed typed weight (input gradient of typed_linear).",
    description="""
`out[i, :] = dy[i, :] @ W[type(i)]^T`, with the same `slice` rule as `typed_linear`. Autodiff
emits it for `∂L/∂x` of `out = typed_linear(x, W)`.
""",
    operands=(
        _G,
        Operand("dy", "tensor", "row gradients `[M, N]`"),
        Operand("weight", "tensor", "`[R, K, N]` when sliced, `[K, N]` when shared"),
    ),
    results=(Operand("out", "tensor", "`[M, K]`, same kind as `dy`"),),
    attributes=(
        Attr("slice", "enum", "how the weight is picked per row", ("etype", "ntype", "none")),
    ),
    example=_ex(
        "%g: !hector_inter.graph, %dy: tensor<?x8xf32>, %w: tensor<3x16x8xf32>",
        '  %0 = "hector_inter.typed_linear_transposed"(%g, %dy, %w) {slice = "etype"} '
        ": (!hector_inter.graph, tensor<?x8xf32>, tensor<3x16x8xf32>) -> tensor<?x16xf32>",
        "%0 : tensor<?x16xf32>",
    ),
)

TYPED_LINEAR_WGRAD = OpDef(
    name="typed_linear_weight_grad",
    summary="Per-type sum of outer products (weight gradient of typed_linear).",
    description="""
`out[t] = Σ_{i : type(i) = t} x[i, :]^T ⊗ dy[i, :]` (`out = Σ_i x[i]^T ⊗ dy[i]` with
`slice = "none"`). Autodiff emits it for `∂L/∂W` of `typed_linear(x, W)`; when `x` is a
gather, the lowering reads the gathered rows in place.
""",
    operands=(
        _G,
        Operand("x", "tensor", "forward input rows `[M, K]`"),
        Operand("dy", "tensor", "row gradients `[M, N]`"),
    ),
    results=(Operand("out", "tensor", "weight-kind `[R, K, N]` (sliced) or `[K, N]`"),),
    attributes=(Attr("slice", "enum", "how rows are grouped by type", ("etype", "ntype", "none")),),
    example=_ex(
        "%g: !hector_inter.graph, %x: tensor<?x16xf32>, %dy: tensor<?x8xf32>",
        '  %0 = "hector_inter.typed_linear_weight_grad"(%g, %x, %dy) {slice = "etype"} '
        ": (!hector_inter.graph, tensor<?x16xf32>, tensor<?x8xf32>) -> tensor<3x16x8xf32>",
        "%0 : tensor<3x16x8xf32>",
    ),
)

DOT = OpDef(
    name="dot",
    summary="Per-head inner product of two row tensors.",
    description="""
`out[i, h] = Σ_{d < Dh} x[i, h*Dh + d] * y[i, h*Dh + d]` with `Dh = D / H` and `H` the result
width: the attention logit `q_i · k_j` of HGT per head (and, with `H = 1`, a plain edge inner
product). Both operands index the same rows.
""",
    operands=(
        Operand("x", "tensor", "rows `[M, D]`"),
        Operand("y", "tensor", "rows `[M, D]`"),
    ),
    results=(Operand("out", "tensor", "`[M, H]`, `H` divides `D`"),),
    example=_ex(
        "%x: tensor<?x16xf32>, %y: tensor<?x16xf32>",
        '  %0 = "hector_inter.dot"(%x, %y) '
        ": (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x2xf32>",
        "%0 : tensor<?x2xf32>",
    ),
)

UNARY_GRAD = OpDef(
    name="unary_grad",
    summary="Input gradient of an elementwise unary function.",
    description="""
`out = dy * fn'(…)` elementwise, where `ref` is what the derivative is written in (the `unary`
table's last column): the forward *input* or the forward *output* (so autodiff keeps whichever
the forward already has); functions whose derivative needs neither ignore `ref`.
""",
    operands=(
        Operand("ref", "tensor", "forward input or output `[M, D]` (see above)"),
        Operand("dy", "tensor", "output gradient `[M, D]`"),
    ),
    results=(Operand("out", "tensor", "input gradient `[M, D]`"),),
    attributes=(
        Attr("fn", "enum", "the forward function", UNARY_FNS),
        Attr("slope", "float", "negative slope of `leaky_relu`"),
    ),
    example=_ex(
        "%x: tensor<?x8xf32>, %dy: tensor<?x8xf32>",
        '  %0 = "hector_inter.unary_grad"(%x, %dy) {fn = "relu", slope = 0.0 : f32} '
        ": (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>",
        "%0 : tensor<?x8xf32>",
    ),
)

#: The incoming edges one group spans (a softmax's, a maximum's): per destination, or per
#: (destination, edge type).
_GROUPED_BY = Attr(
    "by",
    "enum",
    "the edges one group spans: per destination, or per (destination, edge type)",
    ("dst", "dst_etype"),
)


def _grouped_op(
    name: str, summary: str, description: str, inputs: tuple[Operand, ...], out: str, width: int
) -> OpDef:
    """An op over the groups of incoming edges ``by`` names: edge rows ``[E, width]`` in (the
    graph, then ``inputs``) and out; its example applies it to one argument per input."""
    types = ", ".join(["!hector_inter.graph"] + [f"tensor<?x{width}xf32>"] * len(inputs))
    args = ", ".join(f"%{o.name}: tensor<?x{width}xf32>" for o in inputs)
    names = ", ".join(f"%{o.name}" for o in inputs)
    call = f'  %0 = "hector_inter.{name}"(%g, {names}) {{by = "dst"}} : ({types}) -> '
    return OpDef(
        name=name,
        summary=summary,
        description=description,
        operands=(_G, *inputs),
        results=(Operand("out", "tensor", out),),
        attributes=(_GROUPED_BY,),
        example=_ex(
            f"%g: !hector_inter.graph, {args}",
            call + f"tensor<?x{width}xf32>",
            f"%0 : tensor<?x{width}xf32>",
        ),
    )


EDGE_SOFTMAX = _grouped_op(
    "edge_softmax",
    "Softmax of edge scores over the incoming edges of each node, per head.",
    """
`out[e, h] = exp(x[e, h] - m[dst(e), h]) / Σ_{e' : dst(e') = dst(e)} exp(x[e', h] - m[…])` with
`m[v, h] = max_{e' : dst(e') = v} x[e', h]` (max-subtracted, so large logits do not overflow).
RGAT's and HGT's attention normalisation (PyG's `softmax(alpha, index)`).

`by` names the edges one softmax spans: `"dst"`, all incoming edges of `dst(e)` (above);
`"dst_etype"`, the incoming edges of `dst(e)` of the same edge type (RGAT's within-relation
attention), the sums and maxima running over `{e' : dst(e') = dst(e), etype(e') = etype(e)}`.
""",
    (Operand("x", "tensor", "edge-wise scores `[E, H]`"),),
    "edge-wise weights `[E, H]`",
    2,
)

EDGE_SOFTMAX_GRAD = _grouped_op(
    "edge_softmax_grad",
    "Input gradient of edge_softmax, from its output.",
    """
`out[e, h] = y[e, h] * (dy[e, h] - Σ_{e' : dst(e') = dst(e)} dy[e', h] * y[e', h])` where `y` is
the forward output: the softmax Jacobian applied without materialising it; the sum spans the
edges of the forward's `by` (same `etype(e')` too with `"dst_etype"`).
""",
    (
        Operand("y", "tensor", "forward output `[E, H]`"),
        Operand("dy", "tensor", "output gradient `[E, H]`"),
    ),
    "input gradient `[E, H]`",
    2,
)

EDGE_MAX = _grouped_op(
    "edge_max",
    "The elementwise maximum of each group of incoming edges' rows, on every edge of it.",
    """
`out[e, :] = max_{e' : dst(e') = dst(e)} x[e', :]`, elementwise: each edge carries its group's
maximum. Max aggregation (PyG `aggr="max"`) is
`sum_to_dst(scale(edge_max(x), degree_norm {by = "dst"}))`: a node's `c` incoming edges each
carry its maximum times `1/c`, and a node without edges gets 0, as PyG's scatter max gives.

`by` names the edges one maximum spans: `"dst"`, all incoming edges of `dst(e)`;
`"dst_etype"`, those of the same edge type too (`RGCNConv(aggr="max")`: one maximum per node
and relation, each then multiplied by its relation's weight).
""",
    (Operand("x", "tensor", "edge-wise rows `[E, D]`"),),
    "edge-wise rows `[E, D]`: each group's maximum",
    8,
)

EDGE_MAX_GRAD = _grouped_op(
    "edge_max_grad",
    "Input gradient of edge_max: each group's summed gradient, shared by its maxima.",
    """
`out[e, j] = [x[e, j] = y[e, j]] · (Σ_{e' in e's group} dy[e', j]) / #{e' in e's group :
x[e', j] = y[e', j]}`, with `y` the forward output: the gradient of a group's maximum goes to
the edges that hold it, split evenly among ties (as PyTorch's `scatter_reduce(..., "amax")`
splits it). Groups as the forward's `by`.
""",
    (
        Operand("x", "tensor", "forward input `[E, D]`"),
        Operand("y", "tensor", "forward output `[E, D]`"),
        Operand("dy", "tensor", "output gradient `[E, D]`"),
    ),
    "input gradient `[E, D]`",
    8,
)

SUM_ROWS = OpDef(
    name="sum_rows",
    summary="Sum of all rows, or of the rows of each type (bias gradients).",
    description="""
`by = "none"`: `out[d] = Σ_i x[i, d]` (gradient of a shared bias). `by = "type"`:
`out[t, d] = Σ_{i : type(i) = t} x[i, d]`, the type being the node type of node-wise rows or the
edge type of edge-wise rows (gradient of a typed bias); this form takes the graph as its
optional second operand.
""",
    operands=(
        Operand("x", "tensor", "rows `[M, D]`"),
        Operand("graph", "hector_inter.graph", "the graph (typed sums only)", "optional"),
    ),
    results=(Operand("out", "tensor", "weight-kind `[D]` or `[T, D]`"),),
    attributes=(Attr("by", "enum", "which rows are summed together", ("none", "type")),),
    example=_ex(
        "%x: tensor<?x8xf32>",
        '  %0 = "hector_inter.sum_rows"(%x) {by = "none"} : (tensor<?x8xf32>) -> tensor<8xf32>',
        "%0 : tensor<8xf32>",
    ),
)


def _index_op(name: str, summary: str, description: str, rowmap: RowMap, adjoint: str) -> OpDef:
    return OpDef(
        name=name,
        summary=summary,
        description=description,
        operands=(_G, Operand("x", "tensor", f"{rowmap.src.text} rows `[*, D]`")),
        results=(Operand("out", "tensor", f"{rowmap.dst.text} rows `[*, D]`"),),
        rowmap=rowmap,
        adjoint=adjoint,
        example=_ex(
            "%g: !hector_inter.graph, %x: tensor<?x8xf32>",
            f'  %0 = "hector_inter.{name}"(%g, %x) '
            ": (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>",
            "%0 : tensor<?x8xf32>",
        ),
    )


COMPACT_GATHER_SRC = _index_op(
    "compact_gather_src",
    "Copy the source-node row of each unique (source, edge type) pair onto it.",
    """
`out[c, :] = x[compact_src(c), :]` for every *compact row* `c`, one per unique (source node,
edge type) pair of the graph. Compact materialization rewrites `typed_linear(gather_src(x), W)`
into `expand_compact(typed_linear(compact_gather_src(x), W))`, so the product is computed once
per pair instead of once per edge. The compaction map is built once per graph by the runtime.
""",
    RowMap("compact_src", reduce=False, src=Kind.NODE, dst=Kind.COMPACT),
    "sum_compact_to_src",
)

EXPAND_COMPACT = _index_op(
    "expand_compact",
    "Read each edge's row from its (source, edge type) pair.",
    """
`out[e, :] = x[edge_compact(e), :]`: the per-edge view of a compact value. The lowering folds
it into the reading template's index, so the per-edge copy is never built.
""",
    RowMap("edge_compact", reduce=False, src=Kind.COMPACT, dst=Kind.EDGE),
    "sum_to_compact",
)

SUM_TO_COMPACT = _index_op(
    "sum_to_compact",
    "Sum edge rows onto their (source, edge type) pair.",
    """
`out[c, :] = Σ_{e : edge_compact(e) = c} x[e, :]`; the adjoint of `expand_compact`.
""",
    RowMap("edge_compact", reduce=True, src=Kind.EDGE, dst=Kind.COMPACT, rows="compact_src"),
    "expand_compact",
)

SUM_COMPACT_TO_SRC = _index_op(
    "sum_compact_to_src",
    "Sum compact rows onto their source nodes.",
    """
`out[u, :] = Σ_{c : compact_src(c) = u} x[c, :]`; the adjoint of `compact_gather_src`.
""",
    RowMap("compact_src", reduce=True, src=Kind.COMPACT, dst=Kind.NODE, rows="ntype"),
    "compact_gather_src",
)

SUM_TO_DST_COMPACT = _index_op(
    "sum_to_dst_compact",
    "Sum edge rows onto their (destination, edge type) pair.",
    """
`out[p, :] = Σ_{e : edge_dst_compact(e) = p} x[e, :]` for every *destination pair* `p`, one per
unique (destination node, edge type) pair of the graph. `hector-aggregation-order` rewrites
`sum_to_dst(scale(typed_linear(m, W), s))` into
`sum_dst_compact_to_dst(typed_linear(sum_to_dst_compact(scale(m, s)), W))`: each relation's
rows are summed per destination first and multiplied once per pair (PyG `RGCNConv`'s order).
""",
    RowMap(
        "edge_dst_compact",
        reduce=True,
        src=Kind.EDGE,
        dst=Kind.DST_COMPACT,
        rows="dst_compact_dst",
    ),
    "expand_dst_compact",
)

EXPAND_DST_COMPACT = _index_op(
    "expand_dst_compact",
    "Read each edge's row from its (destination, edge type) pair.",
    """
`out[e, :] = x[edge_dst_compact(e), :]`; the adjoint of `sum_to_dst_compact`. The lowering folds
it into the reading template's index.
""",
    RowMap("edge_dst_compact", reduce=False, src=Kind.DST_COMPACT, dst=Kind.EDGE),
    "sum_to_dst_compact",
)

SUM_DST_COMPACT_TO_DST = _index_op(
    "sum_dst_compact_to_dst",
    "Sum destination-pair rows onto their destination nodes.",
    """
`out[v, :] = Σ_{p : dst_compact_dst(p) = v} x[p, :]`: the per-relation results of a node added
up (the last step of aggregate-then-transform).
""",
    RowMap("dst_compact_dst", reduce=True, src=Kind.DST_COMPACT, dst=Kind.NODE, rows="ntype"),
    "dst_compact_gather_dst",
)

DST_COMPACT_GATHER_DST = _index_op(
    "dst_compact_gather_dst",
    "Copy the destination-node row of each unique (destination, edge type) pair onto it.",
    """
`out[p, :] = x[dst_compact_dst(p), :]`; the adjoint of `sum_dst_compact_to_dst` (the output
gradient of each node read by each of its relations).
""",
    RowMap("dst_compact_dst", reduce=False, src=Kind.NODE, dst=Kind.DST_COMPACT),
    "sum_dst_compact_to_dst",
)

WEIGHT_PRODUCT = OpDef(
    name="weight_product",
    summary="Product of two weights, per slice (what linear operator reordering computes).",
    description="""
With `variant = "xw"`: `out[r] = a[r] @ b` (`a` `[R, K, N]` or `[K, N]`, `b` `[N, H]`): RGAT's
`W_r q` computed once per edge type instead of projecting every edge twice. `"xwt"`:
`out[r] = a[r] @ b^T` and `"xty"`: `out = Σ_r a[r]^T @ b[r]` are its two gradients.

*Per-slice* form (`b` of rank 3, `[R, N, H]`): `out[r] = a[r] @ b[r]`, with `a` `[R, K, N]` or
`[R, N]` (one row per slice), `"xwt"` `out[r] = a[r] @ b[r]^T`, and `"xty"` with a rank-3
result `out[r] = a[r]^T @ b[r]` (not summed over `r`). This is HGT's chained fold:
`W_{src type(r)} @ W_rel[r]` once per relation. All operands and the result are weights.
""",
    operands=(
        Operand("a", "tensor", "weight `[R, K, N]` / `[K, N]`"),
        Operand("b", "tensor", "weight"),
    ),
    results=(Operand("out", "tensor", "weight"),),
    attributes=(Attr("variant", "enum", "which product", ("xw", "xwt", "xty")),),
    example=_ex(
        "%w: tensor<3x16x8xf32>, %q: tensor<8x2xf32>",
        '  %0 = "hector_inter.weight_product"(%w, %q) {variant = "xw"} '
        ": (tensor<3x16x8xf32>, tensor<8x2xf32>) -> tensor<3x16x2xf32>",
        "%0 : tensor<3x16x2xf32>",
    ),
)


ETYPE_SRC_WEIGHT = OpDef(
    name="etype_src_weight",
    adjoint="etype_src_weight_grad",
    summary="Pick, for each edge type, the node-type weight of its source node type.",
    description="""
`out[r] = w[src_ntype(r)]` for every edge type `r`, where `src_ntype(r)` is the node type of
every source node of relation `r` (the graph's `etype_src_ntype` array; a relation without
edges reads type 0). `w` is `[T, ...]` (a node-typed weight or bias), `out` is `[R, ...]`.
`hector-linear-reorder` emits it to fold a node-typed linear into the relation linear that
follows a source gather — only for graphs whose relations each have one source node type.
""",
    operands=(_G, Operand("w", "tensor", "node-typed weight `[T, ...]`")),
    results=(Operand("out", "tensor", "edge-typed weight `[R, ...]`"),),
    example=_ex(
        "%g: !hector_inter.graph, %w: tensor<3x16x8xf32>",
        '  %0 = "hector_inter.etype_src_weight"(%g, %w) '
        ": (!hector_inter.graph, tensor<3x16x8xf32>) -> tensor<5x16x8xf32>",
        "%0 : tensor<5x16x8xf32>",
    ),
)

ETYPE_SRC_WEIGHT_GRAD = OpDef(
    name="etype_src_weight_grad",
    adjoint="etype_src_weight",
    summary="Sum per-relation weight gradients onto their source node types.",
    description="""
`out[t] = Σ_{r : src_ntype(r) = t} dw[r]`: the adjoint of `etype_src_weight` (`dw` `[R, ...]`,
`out` `[T, ...]`).
""",
    operands=(_G, Operand("dw", "tensor", "edge-typed weight gradient `[R, ...]`")),
    results=(Operand("out", "tensor", "node-typed weight gradient `[T, ...]`"),),
    example=_ex(
        "%g: !hector_inter.graph, %dw: tensor<5x16x8xf32>",
        '  %0 = "hector_inter.etype_src_weight_grad"(%g, %dw) '
        ": (!hector_inter.graph, tensor<5x16x8xf32>) -> tensor<3x16x8xf32>",
        "%0 : tensor<3x16x8xf32>",
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
    ops=(
        GATHER_SRC,
        GATHER_DST,
        TYPED_LINEAR,
        DEGREE_NORM,
        SCALE,
        SUM_TO_DST,
        ADD,
        UNARY,
        SUM_TO_SRC,
        TYPED_LINEAR_T,
        TYPED_LINEAR_WGRAD,
        DOT,
        UNARY_GRAD,
        EDGE_SOFTMAX,
        EDGE_SOFTMAX_GRAD,
        EDGE_MAX,
        EDGE_MAX_GRAD,
        SUM_ROWS,
        COMPACT_GATHER_SRC,
        EXPAND_COMPACT,
        SUM_TO_COMPACT,
        SUM_COMPACT_TO_SRC,
        WEIGHT_PRODUCT,
        ETYPE_SRC_WEIGHT,
        ETYPE_SRC_WEIGHT_GRAD,
        SUM_TO_DST_COMPACT,
        EXPAND_DST_COMPACT,
        SUM_DST_COMPACT_TO_DST,
        DST_COMPACT_GATHER_DST,
    ),
)

#: Typed builders, one per op (``OPS.<op>(operand=..., attr=..., result=type, loc=loc)``).
OPS = builders(DIALECT)


def view(op: Any) -> OpAccess:
    """Operands and attributes of one of this dialect's ops, by their spec names."""
    return _view(DIALECT, op)


def graph_type(context: Any = None) -> Any:
    """``!hector_inter.graph`` in ``context`` (default: the current one), as a type object.

    IRDL types have no Python builder, so this is the one place that names the type; passes
    compare types with ``==`` against it (``is_graph``), never as text.
    """
    from .builders import ir_of

    ir = ir_of(context)
    return ir.Type.parse(f"!{DIALECT.name}.graph", context)


def is_graph(t: Any) -> bool:
    """Whether ``t`` is ``!hector_inter.graph``."""
    return bool(t == graph_type(t.context))
