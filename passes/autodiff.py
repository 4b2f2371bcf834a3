"""``hector-autodiff``: derive the backward program of each function on ``hector_inter``.

For every function ``@f(%g, args...) -> results`` that holds relational ops (and is not itself
generated), the pass adds two functions next to it and leaves ``@f`` as it is:

* ``@f_train(%g, args...) -> (results..., saved...)`` — the forward program that also returns
  the intermediate values the backward program reads (*saved* values);
* ``@f_backward(%g, args..., saved..., d_results...) -> (grads...)`` — reverse-mode
  derivatives, written with ``hector_inter`` ops only, so they get the same lowering, fusion and
  kernels as the forward program.

Forward values are reused, never recomputed, except graph structure and gathers: a
``degree_norm`` is a cached graph array and a gather (``gather_src``, ``gather_dst``,
``compact_gather_src``, ``expand_compact``) of a value the
backward program already has is re-emitted there (the lowering folds it into the reading
template's index, so it costs no memory); everything else the backward program needs is saved.
Gradients of one weight used by several ops are returned as separate partial results and
summed by the caller (``hector.grad_of`` maps each result to its argument), so weight-shaped
accumulation never needs a kernel. Arguments and results of the generated functions carry
``hector.kind`` / ``hector.result_kinds`` so their row counts are known without inference.

Rules (``dy`` is the adjoint of the op's result):

| forward | backward |
|---|---|
| `gather_src(x)` / `gather_dst(x)` | `dx += sum_to_src(dy)` / `sum_to_dst(dy)` |
| `sum_to_dst(x)` / `sum_to_src(x)` | `dx += gather_dst(dy)` / `gather_src(dy)` |
| `compact_gather_src` / `expand_compact` | `sum_compact_to_src` / `sum_to_compact` (and back) |
| `etype_src_weight(w)` | `dw += etype_src_weight_grad(dy)` (re-emitted, not saved) |
| `weight_product(a, b)` | `da += weight_product(dy, b){xwt}`, `db += weight_product(a, dy){xty}` |
| | (per-slice products alike, `db` per slice) |
| `typed_linear(x, W)` | `dx += typed_linear_transposed(dy, W)`, |
| | `dW += typed_linear_weight_grad(x, dy)` |
| `scale(x, s)` | `dx += scale(dy, s)`, `ds += dot(dy, x)` (none for `degree_norm`) |
| `dot(x, y)` | `dx += scale(y, dy)`, `dy_ += scale(x, dy)` |
| `add(a, b)` | `da += dy`, `db += dy` / `sum_rows(dy)` for (typed) biases |
| `unary(x)` | `dx += unary_grad(x or out, dy)` |
| `edge_softmax(x)` | `dx += edge_softmax_grad(out, dy)` |
"""

from __future__ import annotations

import io

from mlir import ir

from ._registry import PassFailure, register_pass
from .verify import COMPACT, EDGE, NODE, WEIGHT, verify_function

_KIND_TEXT = {NODE: "node", EDGE: "edge", WEIGHT: "weight", COMPACT: "compact"}
_OUTPUT_REF = ("exp", "tanh", "sigmoid")  # derivatives written in the forward output
# Each index op's adjoint: gathers sum back, sums gather back.
_PAIRS = (
    ("gather_src", "sum_to_src"),
    ("gather_dst", "sum_to_dst"),
    ("compact_gather_src", "sum_compact_to_src"),
    ("expand_compact", "sum_to_compact"),
    ("etype_src_weight", "etype_src_weight_grad"),  # weights picked per relation (HGT fold)
)
_ADJOINT = {**dict(_PAIRS), **{b: a for a, b in _PAIRS}}
# Forward values the backward program recomputes instead of saving: gathers (folded into the
# reading template's index by the lowering, so they cost nothing).
_REEMIT = tuple(f"hector_inter.{a}" for a, _ in _PAIRS)
GRAPH_TYPE = "!hector_inter.graph"


def _str(op: ir.Operation, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value


def _is_graph(v: ir.Value) -> bool:
    return str(v.type) == GRAPH_TYPE


class _Backward:
    """Builds the text of ``@f_train`` and ``@f_backward`` for one function."""

    def __init__(self, func: ir.Operation) -> None:
        self.func = func
        self.sym = ir.StringAttr(func.attributes["sym_name"]).value
        self.kinds = verify_function(func)
        self.state = ir.AsmState(func)
        self.lines: list[str] = []
        self.n = 0
        self.fwd_names: dict[ir.Value, str] = {}  # forward value → name in the backward body
        self.saved: list[ir.Value] = []
        self.adjoint: dict[ir.Value, str] = {}
        self.weight_partials: dict[ir.Value, list[str]] = {}
        self.graph = "%g"

    # -- emission --------------------------------------------------------------------------
    def fresh(self) -> str:
        self.n += 1
        return f"%d{self.n}"

    def op(
        self,
        name: str,
        operands: list[tuple[str, str]],
        result_type: str,
        attrs: str = "",
        graph: bool = False,
        graph_last: bool = False,
    ) -> str:
        """Emit ``hector_inter.<name>`` on (ssa, type) operands; return the result name."""
        if graph:
            g = (self.graph, GRAPH_TYPE)
            operands = [*operands, g] if graph_last else [g, *operands]
        r = self.fresh()
        attr = f" {{{attrs}}}" if attrs else ""
        self.lines.append(
            f'  {r} = "hector_inter.{name}"({", ".join(o for o, _ in operands)}){attr} : '
            f"({', '.join(t for _, t in operands)}) -> {result_type}"
        )
        return r

    def fwd(self, v: ir.Value) -> str:
        """The backward program's name for forward value ``v`` (argument, re-emitted gather or
        graph array, or a saved value)."""
        if v in self.fwd_names:
            return self.fwd_names[v]
        owner = None if isinstance(v, ir.BlockArgument) else v.owner
        if owner is not None and owner.name in _REEMIT:
            x = owner.operands[1]
            name = self.op(
                owner.name.removeprefix("hector_inter."),
                [(self.fwd(x), str(x.type))],
                str(v.type),
                graph=True,
            )
        elif owner is not None and owner.name == "hector_inter.degree_norm":
            name = self.op("degree_norm", [], str(v.type), f'by = "{_str(owner, "by")}"', True)
        else:
            name = f"%s{len(self.saved)}"
            self.saved.append(v)
        self.fwd_names[v] = name
        return name

    def acc(self, v: ir.Value, grad: str) -> None:
        """Add ``grad`` to the adjoint of ``v``."""
        if _is_graph(v) or self._constant(v):
            return
        if self.kinds.get(v) == WEIGHT:
            self.weight_partials.setdefault(v, []).append(grad)
            return
        prev = self.adjoint.get(v)
        if prev is None:
            self.adjoint[v] = grad
        else:
            t = str(v.type)
            self.adjoint[v] = self.op("add", [(prev, t), (grad, t)], t)

    def _constant(self, v: ir.Value) -> bool:
        owner = None if isinstance(v, ir.BlockArgument) else v.owner
        return owner is not None and owner.name == "hector_inter.degree_norm"

    # -- rules -----------------------------------------------------------------------------
    def rule(self, op: ir.Operation, dy: str) -> None:
        kind = op.name.removeprefix("hector_inter.")
        ops = list(op.operands)
        out = op.results[0]
        t = lambda v: str(v.type)  # noqa: E731
        if kind in _ADJOINT:
            self.acc(ops[1], self.op(_ADJOINT[kind], [(dy, t(out))], t(ops[1]), graph=True))
        elif kind == "weight_product":
            a, b = ops
            if _str(op, "variant") != "xw":
                raise PassFailure(
                    "hector-autodiff: only weight_product xw is differentiable", op.location
                )
            self.acc(
                a,
                self.op(
                    "weight_product", [(dy, t(out)), (self.fwd(b), t(b))], t(a), 'variant = "xwt"'
                ),
            )
            self.acc(
                b,
                self.op(
                    "weight_product", [(self.fwd(a), t(a)), (dy, t(out))], t(b), 'variant = "xty"'
                ),
            )
        elif kind == "typed_linear":
            x, w = ops[1], ops[2]
            sl = f'slice = "{_str(op, "slice")}"'
            self.acc(
                x,
                self.op(
                    "typed_linear_transposed",
                    [(dy, t(out)), (self.fwd(w), t(w))],
                    t(x),
                    sl,
                    graph=True,
                ),
            )
            self.acc(
                w,
                self.op(
                    "typed_linear_weight_grad",
                    [(self.fwd(x), t(x)), (dy, t(out))],
                    t(w),
                    sl,
                    graph=True,
                ),
            )
        elif kind == "scale":
            x, s = ops
            self.acc(x, self.op("scale", [(dy, t(out)), (self.fwd(s), t(s))], t(x)))
            if not self._constant(s):
                self.acc(s, self.op("dot", [(dy, t(out)), (self.fwd(x), t(x))], t(s)))
        elif kind == "dot":
            x, y = ops
            self.acc(x, self.op("scale", [(self.fwd(y), t(y)), (dy, t(out))], t(x)))
            self.acc(y, self.op("scale", [(self.fwd(x), t(x)), (dy, t(out))], t(y)))
        elif kind == "add":
            a, b = ops[0], ops[1]
            self.acc(a, dy)
            rank = ir.ShapedType(b.type).rank
            if rank == 1:
                self.acc(b, self.op("sum_rows", [(dy, t(out))], t(b), 'by = "none"'))
            elif len(ops) > 2:
                self.acc(
                    b,
                    self.op(
                        "sum_rows", [(dy, t(out))], t(b), 'by = "type"', graph=True, graph_last=True
                    ),
                )
            else:
                self.acc(b, dy)
        elif kind == "unary":
            fn = _str(op, "fn")
            x = ops[0]
            if fn == "copy":
                self.acc(x, dy)
                return
            slope = ir.FloatAttr(op.attributes["slope"]).value
            ref = out if fn in _OUTPUT_REF else x
            attrs = f'fn = "{fn}", slope = {slope!r} : f32'
            self.acc(x, self.op("unary_grad", [(self.fwd(ref), t(ref)), (dy, t(out))], t(x), attrs))
        elif kind == "edge_softmax":
            x = ops[1]
            self.acc(
                x,
                self.op(
                    "edge_softmax_grad", [(self.fwd(out), t(out)), (dy, t(out))], t(x), graph=True
                ),
            )
        elif kind == "degree_norm":
            return
        else:
            raise PassFailure(f"hector-autodiff: no derivative for '{op.name}'", op.location)

    # -- the two functions -----------------------------------------------------------------
    def run(self) -> str:
        block = self.func.regions[0].blocks[0]
        body = [o.operation for o in block.operations]
        ret = body[-1]
        if ret.name != "func.return":
            raise PassFailure("function does not end in func.return", self.func.location)
        args = list(block.arguments)
        graph_args = [a for a in args if _is_graph(a)]
        if len(graph_args) != 1:
            raise PassFailure(
                "hector-autodiff needs exactly one !hector_inter.graph argument",
                self.func.location,
            )
        for i, a in enumerate(args):
            if not _is_graph(a):
                self.fwd_names[a] = f"%a{i}"
        results = list(ret.operands)
        d_names = [f"%dy{i}" for i in range(len(results))]
        for r, d in zip(results, d_names, strict=True):
            if isinstance(r, ir.BlockArgument) or r in self.adjoint:
                self.acc(r, d)  # returned argument or returned twice: accumulate
            else:
                self.adjoint[r] = d
        for op in reversed(body[:-1]):
            if not op.name.startswith("hector_inter."):
                raise PassFailure(
                    f"hector-autodiff: '{op.name}' is not a hector_inter op", op.location
                )
            res = op.results[0]
            if res in self.adjoint:
                self.rule(op, self.adjoint[res])
            elif res in self.weight_partials:  # a computed weight (weight_product)
                partials = self.weight_partials.pop(res)
                if len(partials) != 1:
                    raise PassFailure(
                        "hector-autodiff: a computed weight read by several ops is not supported",
                        op.location,
                    )
                self.rule(op, partials[0])
        # Gradient results, in argument order; partial weight gradients one result each.
        grads: list[tuple[int, str, ir.Value]] = []
        for i, a in enumerate(args):
            if _is_graph(a):
                continue
            if a in self.adjoint:
                grads.append((i, self.adjoint[a], a))
            for p in self.weight_partials.get(a, []):
                grads.append((i, p, a))
        return self._train_text(args, results) + "\n" + self._backward_text(args, results, grads)

    def _kind(self, v: ir.Value) -> str:
        k = self.kinds.get(v)
        if k is None:
            raise PassFailure(
                "hector-autodiff: cannot tell whether a value is node-wise, edge-wise or a "
                "weight; give the argument a hector.kind attribute",
                self.func.location,
            )
        return _KIND_TEXT[k]

    def _sig(self, args: list[ir.Value]) -> list[str]:
        sig = []
        for i, a in enumerate(args):
            if _is_graph(a):
                sig.append(f"%g: {GRAPH_TYPE}")
            else:
                sig.append(f'%a{i}: {a.type} {{hector.kind = "{self._kind(a)}"}}')
        return sig

    def _train_text(self, args: list[ir.Value], results: list[ir.Value]) -> str:
        """``@f_train``: the forward body, returning results and saved values."""
        buf = io.StringIO()
        for op in [o.operation for o in self.func.regions[0].blocks[0].operations][:-1]:
            op.print(state=self.state, file=buf)
            buf.write("\n")
        text = "\n".join("  " + line for line in buf.getvalue().splitlines())
        outs = [*results, *self.saved]
        names = [v.get_name(self.state) for v in outs]
        types = [str(v.type) for v in outs]
        kinds = ", ".join(f'"{self._kind(v)}"' for v in outs)
        block = self.func.regions[0].blocks[0]
        sig = []
        for a in block.arguments:
            nm = a.get_name(self.state)
            if _is_graph(a):
                sig.append(f"{nm}: {GRAPH_TYPE}")
            else:
                sig.append(f'{nm}: {a.type} {{hector.kind = "{self._kind(a)}"}}')
        return (
            f"func.func @{self.sym}_train({', '.join(sig)}) -> ({', '.join(types)}) attributes "
            f"{{hector.result_kinds = [{kinds}], hector.num_saved = {len(self.saved)} : i64, "
            f'hector.train_of = "{self.sym}"}} {{\n'
            f"{text}\n  return {', '.join(names)} : {', '.join(types)}\n}}"
        )

    def _backward_text(
        self,
        args: list[ir.Value],
        results: list[ir.Value],
        grads: list[tuple[int, str, ir.Value]],
    ) -> str:
        sig = self._sig(args)
        for k, v in enumerate(self.saved):
            sig.append(f'%s{k}: {v.type} {{hector.kind = "{self._kind(v)}"}}')
        for i, r in enumerate(results):
            sig.append(f'%dy{i}: {r.type} {{hector.kind = "{self._kind(r)}"}}')
        if not grads:
            raise PassFailure(
                "hector-autodiff: no argument receives a gradient", self.func.location
            )
        types = [str(a.type) for _, _, a in grads]
        kinds = ", ".join(f'"{self._kind(a)}"' for _, _, a in grads)
        grad_of = ", ".join(str(i - 1) for i, _, _ in grads)  # tensor position (graph first)
        return (
            f"func.func @{self.sym}_backward({', '.join(sig)}) -> ({', '.join(types)}) "
            f"attributes {{hector.result_kinds = [{kinds}], hector.grad_of = [{grad_of}], "
            f'hector.backward_of = "{self.sym}"}} {{\n'
            + "\n".join(self.lines)
            + f"\n  return {', '.join(n for _, n, _ in grads)} : {', '.join(types)}\n}}"
        )


def _generated(func: ir.Operation) -> bool:
    return "hector.train_of" in func.attributes or "hector.backward_of" in func.attributes


@register_pass(
    "hector-autodiff",
    "Add <f>_train (forward + saved values) and <f>_backward (reverse-mode gradients) for "
    "every hector_inter function",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point: differentiate every function with relational ops."""
    block = module_op.regions[0].blocks[0]
    funcs = [
        op.operation
        for op in block.operations
        if op.operation.name == "func.func"
        and len(op.operation.regions[0].blocks)
        and not _generated(op.operation)
    ]
    pieces = []
    for func in funcs:
        ops = [o.operation for o in func.regions[0].blocks[0].operations]
        if not any(o.name.startswith("hector_inter.") for o in ops):
            continue
        pieces.append(_Backward(func).run())
    if not pieces:
        return
    text = "module {\n" + "\n".join(pieces) + "\n}"
    try:
        new = ir.Module.parse(text, module_op.context)
    except ir.MLIRError as err:
        raise PassFailure(
            f"internal error: hector-autodiff produced invalid IR: {err}\n--- IR ---\n{text}",
            module_op.location,
        ) from None
    for op in list(new.body.operations):
        block.append(op.operation)
