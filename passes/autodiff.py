"""``hector-autodiff``: derive the backward program of each function on ``hector_inter``.

For every function ``@f(%g, args...) -> results`` that holds relational ops (and is not itself
generated), the pass adds two functions after the module's functions and leaves ``@f`` as it is:

* ``@f_train(%g, args...) -> (results..., saved...)`` — the forward program that also returns
  the intermediate values the backward program reads (*saved* values);
* ``@f_backward(%g, args..., saved..., d_results...) -> (grads...)`` — reverse-mode
  derivatives, written with ``hector_inter`` ops only, so they get the same lowering, fusion and
  kernels as the forward program.

Both are built through the bindings (``func.FuncOp``, block arguments, the typed builders of
``hector_inter``); the new functions carry ``@f``'s location and every backward op the location
of the forward op whose adjoint it is, so a diagnostic on the backward program points at the
user's line.

Forward values are reused, never recomputed, except graph structure and gathers: a
``degree_norm`` is a cached graph array and a gather (an index op whose spec's ``rowmap`` does
not reduce, and ``etype_src_weight``) of a value the backward program already has is re-emitted
there (the lowering folds it into the reading template's index, so it costs no memory);
everything else the backward program needs is saved. Gradients of one weight used by several
ops are returned as separate partial results and summed by the caller (``hector.grad_of`` maps
each result to its argument), so weight-shaped accumulation never needs a kernel. Arguments and
results of the generated functions carry ``hector.kind`` / ``hector.result_kinds`` so their row
counts are known without inference.

An argument marked ``hector.no_grad`` (input features, which need no gradient) gets none, and
neither does any value computed only from such arguments and graph structure: rules build an
adjoint lazily, only for values that lead back to an argument that takes a gradient, so the
backward program holds no kernel, and ``@f_train`` saves no value, for the rest.

Each op's adjoint is one rule in :data:`ADJOINTS`, registered by op name with
:func:`adjoint`; the index ops share one rule that emits the op their spec names as
``adjoint`` (``dy`` is the adjoint of the op's result):

| forward | backward |
|---|---|
| index op `i(x)` (`gather_src`, `sum_to_dst`, ...) | `dx += spec(i).adjoint(dy)` |
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
| `edge_max(x)` | `dx += edge_max_grad(x, out, dy)` |
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from mlir import ir
from mlir.dialects import func

from ..dialects import SPECS, Kind, OpDef
from ..dialects import hector_inter as inter
from ..dialects.builders import OpHandlers
from .registry import PassFailure, register_pass
from .verify import verify_function

_PREFIX = "hector_inter."

#: An adjoint rule: given the backward builder, the forward op and the adjoint ``dy`` of its
#: result, add the adjoints of the op's operands (``Backward.acc``, each built lazily).
AdjointRule = Callable[["Backward", ir.Operation, ir.Value], None]

#: Adjoint rules by op name (without the ``hector_inter.`` prefix).
ADJOINTS: OpHandlers[AdjointRule] = OpHandlers("adjoint rule")
#: Decorator: register the decorated function as the adjoint rule of the ops ``names``.
adjoint = ADJOINTS.register


def _inter_specs() -> dict[str, OpDef]:
    """``hector_inter``'s op specs by short name."""
    return {n.removeprefix(_PREFIX): s for n, s in SPECS.items() if n.startswith(_PREFIX)}


# Forward values the backward program recomputes instead of saving: gathers (folded into the
# reading template's index by the lowering, so they cost nothing), and the per-relation weight
# pick, which is a gather over relations (its spec has no rowmap: it maps no row space).
_REEMIT: frozenset[str] = frozenset(
    {n for n, s in _inter_specs().items() if s.rowmap is not None and not s.rowmap.reduce}
    | {"etype_src_weight"}
)


def _owner(v: ir.Value) -> ir.Operation | None:
    """The op that defines ``v`` (None for a block argument)."""
    return None if isinstance(v, ir.BlockArgument) else v.owner


def _location(v: ir.Value) -> ir.Location:
    """Where ``v`` comes from: its defining op, or the argument's own location."""
    owner = _owner(v)
    return v.location if owner is None else owner.location


def _data_operand(spec: OpDef) -> str:
    """The name of an index op's one operand that is not the graph."""
    (name,) = (o.name for o in spec.operands if o.name != "graph")
    return name


def _kind_attrs(kinds: list[Kind | None], fn: ir.Operation) -> ir.ArrayAttr:
    """``arg_attrs`` for arguments of these kinds (None: the graph, no attribute); those that
    are ``fn``'s arguments keep its ``hector.storage`` (the type the caller passes them in)."""
    given = list(ir.ArrayAttr(fn.attributes["arg_attrs"])) if "arg_attrs" in fn.attributes else []
    attrs = []
    for i, k in enumerate(kinds):
        d: dict[str, ir.Attribute] = {}
        if k is not None:
            d["hector.kind"] = ir.StringAttr.get(k.value)
        if i < len(given) and inter.STORAGE in (arg := ir.DictAttr(given[i])):
            d[inter.STORAGE] = arg[inter.STORAGE]
        attrs.append(ir.DictAttr.get(d))
    return ir.ArrayAttr.get(attrs)


def _string_array(kinds: list[Kind]) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.StringAttr.get(k.value) for k in kinds])


def _i64(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


class Backward:
    """Builds ``@f_train`` and ``@f_backward`` for one function, detached until ``run`` ends."""

    def __init__(self, fn: ir.Operation, graph_type: ir.Type) -> None:
        self.func = fn
        self.sym = ir.StringAttr(fn.attributes["sym_name"]).value
        self.kinds = verify_function(fn)
        self.graph_type = graph_type
        self.saved: list[ir.Value] = []
        self.fwd_values: dict[ir.Value, ir.Value] = {}  # forward value -> backward value
        self.adjoint: dict[ir.Value, ir.Value] = {}
        self.weight_partials: dict[ir.Value, list[ir.Value]] = {}
        self.wants: set[ir.Value] = set()  # forward values that lead back to a gradient
        self.block: ir.Block  # the backward function's body
        self.graph: ir.Value  # its graph argument

    # -- what rules use --------------------------------------------------------------------
    def fwd(self, v: ir.Value) -> ir.Value:
        """The backward program's value for forward value ``v`` (argument, re-emitted gather or
        graph array, or a saved value, which becomes an argument)."""
        if v in self.fwd_values:
            return self.fwd_values[v]
        owner = _owner(v)
        name = None if owner is None else owner.name.removeprefix(_PREFIX)
        if owner is not None and name in _REEMIT:
            spec = inter.DIALECT.op(name)
            x = inter.view(owner).operand(_data_operand(spec))
            build = getattr(inter.OPS, name)
            new = build(
                graph=self.graph,
                **{_data_operand(spec): self.fwd(x)},
                result=v.type,
                loc=owner.location,
            )
        elif owner is not None and name == "degree_norm":
            by = inter.view(owner).attr("by")
            new = inter.OPS.degree_norm(graph=self.graph, by=by, result=v.type, loc=owner.location)
        else:
            new = self.block.add_argument(v.type, _location(v))
            self.saved.append(v)
        self.fwd_values[v] = new
        return new

    def acc(self, v: ir.Value, grad: Callable[[], ir.Value]) -> None:
        """Add ``grad()`` to the adjoint of ``v`` (built only when ``v`` needs an adjoint)."""
        if self.is_graph(v) or self.constant(v) or v not in self.wants:
            return
        grad = grad()
        if self.kinds.get(v) == Kind.WEIGHT:
            self.weight_partials.setdefault(v, []).append(grad)
            return
        prev = self.adjoint.get(v)
        self.adjoint[v] = grad if prev is None else inter.OPS.add(lhs=prev, rhs=grad, result=v.type)

    def constant(self, v: ir.Value) -> bool:
        """Whether ``v`` is graph structure (a ``degree_norm``), which has no adjoint."""
        owner = _owner(v)
        return owner is not None and owner.name == f"{_PREFIX}degree_norm"

    def is_graph(self, v: ir.Value) -> bool:
        """Whether ``v`` is the graph."""
        return v.type == self.graph_type

    # -- the walk --------------------------------------------------------------------------
    def kind(self, v: ir.Value) -> Kind:
        """``v``'s kind, which every argument and result of the new functions needs."""
        k = self.kinds.get(v)
        if k is None:
            raise PassFailure(
                "hector-autodiff: cannot tell whether a value is node-wise, edge-wise or a "
                "weight; give the argument a hector.kind attribute",
                self.func.location,
            )
        return k

    def _rule(self, op: ir.Operation, dy: ir.Value) -> None:
        rule = ADJOINTS.get(op.name.removeprefix(_PREFIX))
        if rule is None or not op.name.startswith(_PREFIX):
            raise PassFailure(f"hector-autodiff: no derivative for '{op.name}'", op.location)
        with op.location:
            rule(self, op, dy)

    def _walk(self, body: list[ir.Operation], results: list[ir.Value], dys: list[ir.Value]) -> None:
        """Propagate the result adjoints ``dys`` back through ``body`` (ending in its return)."""
        with ir.InsertionPoint(self.block), body[-1].location:
            for r, d in zip(results, dys, strict=True):
                if isinstance(r, ir.BlockArgument) or r in self.adjoint:
                    self.acc(r, functools.partial(_same, d))  # returned argument or twice
                else:
                    self.adjoint[r] = d
            for op in reversed(body[:-1]):
                if not op.name.startswith(_PREFIX):
                    raise PassFailure(
                        f"hector-autodiff: '{op.name}' is not a hector_inter op", op.location
                    )
                res = op.results[0]
                if res in self.adjoint:
                    self._rule(op, self.adjoint[res])
                elif res in self.weight_partials:  # a computed weight (weight_product)
                    partials = self.weight_partials.pop(res)
                    if len(partials) != 1:
                        raise PassFailure(
                            "hector-autodiff: a computed weight read by several ops is not "
                            "supported",
                            op.location,
                        )
                    self._rule(op, partials[0])

    def _grads(self, args: list[ir.Value]) -> list[tuple[int, ir.Value, ir.Value]]:
        """(argument position, gradient, argument) in argument order; partial weight gradients
        one result each."""
        grads: list[tuple[int, ir.Value, ir.Value]] = []
        for i, a in enumerate(args):
            if self.is_graph(a):
                continue
            if a in self.adjoint:
                grads.append((i, self.adjoint[a], a))
            for p in self.weight_partials.get(a, []):
                grads.append((i, p, a))
        return grads

    # -- the two functions -----------------------------------------------------------------
    def run(self) -> tuple[ir.Operation, ir.Operation]:
        """Build ``@f_train`` and ``@f_backward``, detached, and return them."""
        block = self.func.regions[0].blocks[0]
        body = [o.operation for o in block.operations]
        ret = body[-1]
        if ret.name != "func.return":
            raise PassFailure("function does not end in func.return", self.func.location)
        args = list(block.arguments)
        if sum(self.is_graph(a) for a in args) != 1:
            raise PassFailure(
                "hector-autodiff needs exactly one !hector_inter.graph argument",
                self.func.location,
            )
        results = list(ret.operands)
        self.wants = _wanting(self.func, [a for a in args if not self.is_graph(a)], body)
        backward = self._start_backward(args, results)
        n_args = len(args)
        self._walk(body, results, list(self.block.arguments)[n_args:])
        train = self._train(body, args, results)
        self._finish_backward(backward, args, results, ret.location)
        return train, backward

    def _start_backward(self, args: list[ir.Value], results: list[ir.Value]) -> func.FuncOp:
        """``@f_backward`` with arguments (args..., d_results...); saved values are appended
        as the walk finds them and the d_results moved behind them at the end."""
        types = [a.type for a in args] + [r.type for r in results]
        ftype = ir.FunctionType.get(types, [])
        fn = func.FuncOp(f"{self.sym}_backward", ftype, loc=self.func.location)
        locs = [a.location for a in args] + [_location(r) for r in results]
        self.block = fn.add_entry_block(arg_locs=locs)
        for a, b in zip(args, list(self.block.arguments)[: len(args)], strict=True):
            if self.is_graph(a):
                self.graph = b
            else:
                self.fwd_values[a] = b
        return fn

    def _finish_backward(
        self, fn: func.FuncOp, args: list[ir.Value], results: list[ir.Value], loc: ir.Location
    ) -> None:
        """Move the d_results behind the saved values, return the gradients, set the ABI."""
        kinds: list[Kind | None] = [None if self.is_graph(a) else self.kind(a) for a in args]
        kinds += [self.kind(v) for v in self.saved] + [self.kind(r) for r in results]
        grads = self._grads(args)
        if not grads:
            raise PassFailure(
                "hector-autodiff: no argument receives a gradient", self.func.location
            )
        # A gradient may be a d_result itself (``a + b``): return the moved argument then.
        outs = [g for _, g, _ in grads]
        n_args = len(args)
        for _ in results:
            old = self.block.arguments[n_args]
            new = self.block.add_argument(old.type, old.location)
            old.replace_all_uses_with(new)
            outs = [new if g == old else g for g in outs]
            self.block.erase_argument(n_args)
        with ir.InsertionPoint(self.block):
            func.ReturnOp(outs, loc=loc)
        inputs = [b.type for b in self.block.arguments]
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(inputs, [a.type for _, _, a in grads])
        )
        fn.arg_attrs = _kind_attrs(kinds, self.func)
        fn.attributes["hector.result_kinds"] = _string_array([self.kind(a) for _, _, a in grads])
        # Tensor position of each gradient's argument (the graph comes first).
        fn.attributes["hector.grad_of"] = ir.ArrayAttr.get([_i64(i - 1) for i, _, _ in grads])
        fn.attributes["hector.backward_of"] = ir.StringAttr.get(self.sym)

    def _train(
        self, body: list[ir.Operation], args: list[ir.Value], results: list[ir.Value]
    ) -> func.FuncOp:
        """``@f_train``: a copy of the forward body, returning results and saved values."""
        outs = [*results, *self.saved]
        kinds = [self.kind(v) for v in outs]
        arg_kinds = [None if self.is_graph(a) else self.kind(a) for a in args]
        ftype = ir.FunctionType.get([a.type for a in args], [v.type for v in outs])
        fn = func.FuncOp(f"{self.sym}_train", ftype, loc=self.func.location)
        entry = fn.add_entry_block(arg_locs=[a.location for a in args])
        copies: dict[ir.Value, ir.Value] = dict(zip(args, entry.arguments, strict=True))
        with ir.InsertionPoint(entry):
            for op in body[:-1]:
                new = op.clone()
                for i, v in enumerate(new.operands):
                    new.operands[i] = copies[v]
                copies.update(zip(op.results, new.results, strict=True))
            func.ReturnOp([copies[v] for v in outs], loc=body[-1].location)
        fn.arg_attrs = _kind_attrs(arg_kinds, self.func)
        fn.attributes["hector.result_kinds"] = _string_array(kinds)
        fn.attributes["hector.num_saved"] = _i64(len(self.saved))
        fn.attributes["hector.train_of"] = ir.StringAttr.get(self.sym)
        return fn


def _same(v: ir.Value) -> ir.Value:
    return v


def _wanting(fn: ir.Operation, args: list[ir.Value], body: list[ir.Operation]) -> set[ir.Value]:
    """The arguments (``args``: all but the graph) that take a gradient, all but those marked
    ``hector.no_grad``, and every value computed from one of them."""
    attrs = ir.ArrayAttr(fn.attributes["arg_attrs"]) if "arg_attrs" in fn.attributes else []
    frozen = {i for i, a in enumerate(attrs) if "hector.no_grad" in ir.DictAttr(a)}
    wants = {a for a in args if a.arg_number not in frozen}
    for op in body:
        if any(o in wants for o in op.operands):
            wants.update(op.results)
    return wants


# -- adjoint rules ---------------------------------------------------------------------------
def _index_rule(bw: Backward, op: ir.Operation, dy: ir.Value) -> None:
    """An index op moves rows through a graph array; its adjoint (named by its spec) moves them
    back: gathers sum, sums gather, the weight pick sums per node type."""
    name = op.name.removeprefix(_PREFIX)
    spec = inter.DIALECT.op(name)
    assert spec.adjoint is not None
    x = inter.view(op).operand(_data_operand(spec))
    build = getattr(inter.OPS, spec.adjoint)
    operand = _data_operand(inter.DIALECT.op(spec.adjoint))
    bw.acc(x, lambda: build(graph=bw.graph, **{operand: dy}, result=x.type))


adjoint(*(n for n, s in _inter_specs().items() if s.adjoint is not None))(_index_rule)


@adjoint("weight_product")
def _weight_product(bw: Backward, op: ir.Operation, dy: ir.Value) -> None:
    v = inter.view(op)
    if v.attr("variant") != "xw":
        raise PassFailure("hector-autodiff: only weight_product xw is differentiable", op.location)
    a, b = v.operand("a"), v.operand("b")
    bw.acc(a, lambda: inter.OPS.weight_product(a=dy, b=bw.fwd(b), variant="xwt", result=a.type))
    bw.acc(b, lambda: inter.OPS.weight_product(a=bw.fwd(a), b=dy, variant="xty", result=b.type))


@adjoint("typed_linear")
def _typed_linear(bw: Backward, op: ir.Operation, dy: ir.Value) -> None:
    v = inter.view(op)
    x, w, sl = v.operand("x"), v.operand("weight"), v.attr("slice")
    bw.acc(
        x,
        lambda: inter.OPS.typed_linear_transposed(
            graph=bw.graph, dy=dy, weight=bw.fwd(w), slice=sl, result=x.type
        ),
    )
    bw.acc(
        w,
        lambda: inter.OPS.typed_linear_weight_grad(
            graph=bw.graph, x=bw.fwd(x), dy=dy, slice=sl, result=w.type
        ),
    )


@adjoint("scale")
def _scale(bw: Backward, op: ir.Operation, dy: ir.Value) -> None:
    v = inter.view(op)
    x, s = v.operand("x"), v.operand("s")
    bw.acc(x, lambda: inter.OPS.scale(x=dy, s=bw.fwd(s), result=x.type))
    bw.acc(s, lambda: inter.OPS.dot(x=dy, y=bw.fwd(x), result=s.type))


@adjoint("dot")
def _dot(bw: Backward, op: ir.Operation, dy: ir.Value) -> None:
    v = inter.view(op)
    x, y = v.operand("x"), v.operand("y")
    bw.acc(x, lambda: inter.OPS.scale(x=bw.fwd(y), s=dy, result=x.type))
    bw.acc(y, lambda: inter.OPS.scale(x=bw.fwd(x), s=dy, result=y.type))


@adjoint("add")
def _add(bw: Backward, op: ir.Operation, dy: ir.Value) -> None:
    v = inter.view(op)
    a, b = v.operand("lhs"), v.operand("rhs")
    bw.acc(a, lambda: dy)
    if ir.ShapedType(b.type).rank == 1:  # a shared bias
        bw.acc(b, lambda: inter.OPS.sum_rows(x=dy, by="none", result=b.type))
    elif v.has("graph"):  # a bias per node or edge type
        bw.acc(b, lambda: inter.OPS.sum_rows(x=dy, graph=bw.graph, by="type", result=b.type))
    else:
        bw.acc(b, lambda: dy)


@adjoint("unary")
def _unary(bw: Backward, op: ir.Operation, dy: ir.Value) -> None:
    v = inter.view(op)
    fn, x = v.attr("fn"), v.operand("x")
    if fn in ("copy", "shift_positive"):  # derivative 1
        bw.acc(x, lambda: dy)
        return
    ref = op.results[0] if inter.unary_fn(fn).grad_ref == "output" else x
    slope = v.attr("slope")
    bw.acc(
        x,
        lambda: inter.OPS.unary_grad(ref=bw.fwd(ref), dy=dy, fn=fn, slope=slope, result=x.type),
    )


@adjoint("edge_softmax")
def _edge_softmax(bw: Backward, op: ir.Operation, dy: ir.Value) -> None:
    x = inter.view(op).operand("x")
    y, by = op.results[0], inter.view(op).attr("by")
    bw.acc(
        x,
        lambda: inter.OPS.edge_softmax_grad(
            graph=bw.graph, y=bw.fwd(y), dy=dy, by=by, result=x.type
        ),
    )


@adjoint("edge_max")
def _edge_max(bw: Backward, op: ir.Operation, dy: ir.Value) -> None:
    v = inter.view(op)
    x, by = v.operand("x"), v.attr("by")
    bw.acc(
        x,
        lambda: inter.OPS.edge_max_grad(
            graph=bw.graph, x=bw.fwd(x), y=bw.fwd(op.results[0]), dy=dy, by=by, result=x.type
        ),
    )


@adjoint("degree_norm")
def _degree_norm(bw: Backward, op: ir.Operation, dy: ir.Value) -> None:
    """Graph structure: no adjoint."""


# -- the pass --------------------------------------------------------------------------------
def _generated(fn: ir.Operation) -> bool:
    return "hector.train_of" in fn.attributes or "hector.backward_of" in fn.attributes


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
    built: list[ir.Operation] = []
    with module_op.context, module_op.location:
        graph_type = inter.graph_type()
        for fn in funcs:
            ops = [o.operation for o in fn.regions[0].blocks[0].operations]
            if any(o.name.startswith(_PREFIX) for o in ops):
                built.extend(f.operation for f in Backward(fn, graph_type).run())
    # Appended only once every function is differentiated: a failure leaves the module as is.
    for fn in built:
        block.append(fn)
