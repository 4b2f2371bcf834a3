"""Random graph-API programs for the API strategies: a :class:`Program` is a list of
:class:`Step` s drawn from a seed, run either as a ``@hector.compile`` forward function (through
the graph API) or eagerly in float64 PyTorch (:class:`Eager`), so the two can be compared.

Values are node rows ``[N, D]``, edge rows ``[E, D]`` or weights (arguments); every program
reads the node features ``x`` (argument 0) and returns node or edge rows.
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from hector_fuzz.api import Finding

__all__ = [
    "UNARY",
    "Eager",
    "Program",
    "Step",
    "compiled",
    "make_graph",
    "make_program",
    "within",
]

#: The unary functions programs draw, with their eager float64 form.
UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "gelu": torch.nn.functional.gelu,
    "silu": torch.nn.functional.silu,
    "leaky_relu": lambda x: torch.nn.functional.leaky_relu(x, 0.2),
    "neg": torch.neg,
}

#: The schema of every generated graph: relations and node types.
RELATIONS, NODE_TYPES = 3, 2


@dataclass(frozen=True)
class Step:
    """One op: ``op`` on the values at ``inputs`` (and the arguments at ``weights``), with its
    attribute ``attr``; its result is the next value."""

    op: str
    inputs: tuple[int, ...]
    weights: tuple[int, ...] = ()
    attr: str | int = ""


@dataclass(frozen=True)
class Program:
    """A random program: its steps, the shapes of its weight arguments (argument 0 is the node
    features, ``[N, width]``) and the values it returns."""

    steps: tuple[Step, ...]
    width: int
    weights: tuple[tuple[int, ...], ...]
    results: tuple[int, ...]

    def shapes(self, nodes: int) -> list[tuple[int, ...]]:
        """Every argument's shape on a graph of ``nodes`` nodes."""
        return [(nodes, self.width), *self.weights]

    def run(self, ops: Any, x: Any, weights: list[Any]) -> Any:
        """The program on ``ops`` (a graph proxy or :class:`Eager`) and the arguments."""
        values = [x]
        for s in self.steps:
            args = [values[i] for i in s.inputs] + [weights[w - 1] for w in s.weights]
            values.append(_apply(ops, s, args))
        out = [values[i] for i in self.results]
        return out[0] if len(out) == 1 else tuple(out)

    def forward(self) -> Callable[..., Any]:
        """The program as a forward function ``f(g, x, *weights)`` for ``hector.compile``."""

        def forward(g: Any, x: Any, *weights: Any) -> Any:
            return self.run(g, x, list(weights))

        # hector.compile counts the tensor parameters: one per argument.
        names = ["g", "x", *(f"w{i}" for i in range(1, len(self.weights) + 1))]
        forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names]
        )
        return forward


def _apply(ops: Any, s: Step, a: list[Any]) -> Any:
    if s.op == "unary":
        if isinstance(ops, Eager):
            return UNARY[str(s.attr)](a[0])
        return (
            -a[0]
            if s.attr == "neg"
            else getattr(a[0], str(s.attr))(*((0.2,) if s.attr == "leaky_relu" else ()))
        )
    if s.op == "add":
        return a[0] + a[1]
    if s.op == "scale":
        return ops.scale(a[0], a[1]) if isinstance(ops, Eager) else a[0] * a[1]
    if s.op == "typed_linear":
        return ops.typed_linear(a[0], a[1], slice=str(s.attr))
    if s.op in ("degree_norm", "edge_softmax"):
        return getattr(ops, s.op)(*a, by=str(s.attr))
    if s.op == "dot":
        return ops.dot(a[0], a[1], heads=int(s.attr))
    return getattr(ops, s.op)(*a)


@dataclass
class _Draft:
    """A program being drawn: each value's kind (``node``/``edge``) and width."""

    rng: random.Random
    kinds: list[str]
    widths: list[int]
    steps: list[Step]
    weights: list[tuple[int, ...]]

    def pick(self, kind: str | None = None) -> int:
        options = [i for i, k in enumerate(self.kinds) if kind is None or k == kind]
        return self.rng.choice(options[-3:])  # mostly recent values: deeper programs

    def push(self, step: Step, kind: str, width: int) -> None:
        self.steps.append(step)
        self.kinds.append(kind)
        self.widths.append(width)

    def weight(self, shape: tuple[int, ...]) -> int:
        self.weights.append(shape)
        return len(self.weights)  # argument position (0 is x)


def _edge(d: _Draft) -> None:
    i = d.pick("node")
    d.push(Step(d.rng.choice(["gather_src", "gather_dst"]), (i,)), "edge", d.widths[i])


def _reduce(d: _Draft) -> None:
    i = d.pick("edge")
    d.push(Step(d.rng.choice(["sum_to_dst", "sum_to_src"]), (i,)), "node", d.widths[i])


def _linear(d: _Draft) -> None:
    i = d.pick()
    k, o = d.widths[i], d.rng.choice([2, 3, 4])
    kind = d.kinds[i]
    slices = ["none", "etype"] if kind == "edge" else ["none", "ntype"]
    how = d.rng.choice(slices)
    types = {"etype": RELATIONS, "ntype": NODE_TYPES}.get(how)
    w = d.weight((k, o) if types is None else (types, k, o))
    d.push(Step("typed_linear", (i,), (w,), how), kind, o)


def _unary(d: _Draft) -> None:
    i = d.pick()
    d.push(Step("unary", (i,), attr=d.rng.choice(sorted(UNARY))), d.kinds[i], d.widths[i])


def _add(d: _Draft) -> None:
    i = d.pick()
    same = [
        j for j in range(len(d.kinds)) if (d.kinds[j], d.widths[j]) == (d.kinds[i], d.widths[i])
    ]
    d.push(Step("add", (i, d.rng.choice(same))), d.kinds[i], d.widths[i])


def _bias(d: _Draft) -> None:
    i = d.pick()
    if d.rng.random() < 0.5:
        w = d.weight((d.widths[i],))
        d.push(Step("add", (i,), (w,)), d.kinds[i], d.widths[i])
        return
    types = RELATIONS if d.kinds[i] == "edge" else NODE_TYPES
    w = d.weight((types, d.widths[i]))
    d.push(Step("typed_bias", (i,), (w,)), d.kinds[i], d.widths[i])


def _norm(d: _Draft) -> None:
    i = d.pick("edge")
    d.push(Step("degree_norm", (), attr=d.rng.choice(["dst", "dst_etype"])), "edge", 1)
    d.push(Step("scale", (i, len(d.kinds) - 1)), "edge", d.widths[i])


def _attention(d: _Draft) -> None:
    i = d.pick("edge")
    width = d.widths[i]
    heads = d.rng.choice([h for h in (1, 2) if width % h == 0])
    d.push(Step("dot", (i, d.pick("edge")) if False else (i, i), attr=heads), "edge", heads)
    d.push(Step("edge_softmax", (len(d.kinds) - 1,), attr=d.rng.choice(["dst", "dst_etype"])),
           "edge", heads)  # fmt: skip
    d.push(Step("scale", (i, len(d.kinds) - 1)), "edge", width)


_MOVES: dict[str, Callable[[_Draft], None]] = {
    "edge": _edge,
    "reduce": _reduce,
    "linear": _linear,
    "unary": _unary,
    "add": _add,
    "bias": _bias,
    "norm": _norm,
    "attention": _attention,
}


@functools.cache
def make_program(seed: int, steps: int = 6) -> Program:
    """The random program of ``seed`` (deterministic): about ``steps`` moves."""
    rng = random.Random(f"hector_fuzz.programs/{seed}")
    width = rng.choice([2, 3, 4])
    d = _Draft(rng, ["node"], [width], [], [])
    for _ in range(rng.randint(2, steps)):
        move = rng.choice(sorted(_MOVES))
        if move in ("reduce", "norm", "attention") and "edge" not in d.kinds:
            move = "edge"
        _MOVES[move](d)
    if "edge" not in d.kinds:
        _edge(d)
    if not any(s.op in ("sum_to_dst", "sum_to_src") for s in d.steps):
        _reduce(d)
    last = len(d.kinds) - 1
    results = (last,) if rng.random() < 0.8 else (last, d.pick())
    return Program(tuple(d.steps), width, tuple(d.weights), tuple(dict.fromkeys(results)))


@functools.cache
def make_graph(seed: int) -> Any:
    """A small random HeteroGraph of the programs' schema (isolated nodes and an empty
    relation among them for some seeds)."""
    from hector import random_graph

    rng = random.Random(f"hector_fuzz.graphs/{seed}")
    nodes = rng.randint(8, 40)
    return random_graph(
        nodes,
        rng.randint(nodes + 1, 5 * nodes),  # E != N: the reference tells rows by count
        RELATIONS,
        num_ntypes=NODE_TYPES,
        empty_etypes=(rng.randrange(RELATIONS),) if rng.random() < 0.3 else (),
        isolated_nodes=rng.choice([0, 0, 2]),
        seed=seed,
    )


class Eager:
    """The graph API in float64 eager PyTorch on a HeteroGraph (the reference)."""

    def __init__(self, g: Any) -> None:
        self.n = g.num_nodes
        self.src, self.dst = g.src.long(), g.dst.long()
        self.etype, self.ntype = g.etype.long(), g.ntype.long()

    def gather_src(self, x: torch.Tensor) -> torch.Tensor:
        """``x[src]``."""
        return x[self.src]

    def gather_dst(self, x: torch.Tensor) -> torch.Tensor:
        """``x[dst]``."""
        return x[self.dst]

    def sum_to_dst(self, m: torch.Tensor) -> torch.Tensor:
        """Edge rows summed onto destinations."""
        return m.new_zeros(self.n, m.shape[1]).index_add(0, self.dst, m)

    def sum_to_src(self, m: torch.Tensor) -> torch.Tensor:
        """Edge rows summed onto sources."""
        return m.new_zeros(self.n, m.shape[1]).index_add(0, self.src, m)

    def typed_linear(self, x: torch.Tensor, w: torch.Tensor, slice: str) -> torch.Tensor:  # noqa: A002
        """``x @ w`` per edge type, node type or shared."""
        if slice == "none":
            return x @ w
        types = self.etype if slice == "etype" else self.ntype
        return torch.bmm(x.unsqueeze(1), w[types]).squeeze(1)

    def typed_bias(self, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``x + b[type]`` (edge rows by edge type, node rows by node type)."""
        return x + b[self.etype if x.shape[0] == len(self.etype) else self.ntype]

    def _groups(self, by: str) -> torch.Tensor:
        return self.dst if by == "dst" else self.dst * 1000 + self.etype

    def degree_norm(self, by: str) -> torch.Tensor:
        """``1/c`` per edge, ``c`` the destination's incoming edges (of the edge's type)."""
        _, inverse, counts = torch.unique(self._groups(by), return_inverse=True, return_counts=True)
        return (1.0 / counts.double())[inverse].unsqueeze(1)

    def scale(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """Rows scaled per head: ``[M, H*D'] * [M, H]``."""
        m, h = s.shape
        return (x.view(m, h, -1) * s.unsqueeze(-1)).view(m, -1)

    def dot(self, x: torch.Tensor, y: torch.Tensor, heads: int) -> torch.Tensor:
        """Per-head inner products ``[M, heads]``."""
        return (x * y).view(x.shape[0], heads, -1).sum(-1)

    def edge_softmax(self, x: torch.Tensor, by: str) -> torch.Tensor:
        """Softmax over each destination's incoming edges (of each type), per head."""
        _, group = torch.unique(self._groups(by), return_inverse=True)
        index = group.unsqueeze(1).expand_as(x)
        top = x.new_full((int(group.max()) + 1 if len(group) else 0, x.shape[1]), -torch.inf)
        top = top.scatter_reduce(0, index, x, "amax", include_self=True)
        e = (x - top[group]).exp()
        return e / e.new_zeros(top.shape).index_add(0, group, e)[group]


_COMPILED: dict[tuple[int, tuple[bool, bool, bool]], Any] = {}


def compiled(seed: int, switches: tuple[bool, bool, bool] = (True, True, True)) -> Any:
    """The ``@hector.compile`` function of program ``seed`` with these switches (kept per
    worker, so its kernels are reused)."""
    import hector

    key = (seed, switches)
    if key not in _COMPILED:
        fn = make_program(seed).forward()
        fn.__name__ = f"program_{seed}"
        c, r, f = switches
        _COMPILED[key] = hector.compile(fn, compact=c, reorder=r, fuse=f)
    return _COMPILED[key]


def within(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Raise :class:`Finding` unless float32 ``got`` matches the float64 ``want`` (scaled
    tolerance: sums round in proportion to their size)."""
    if got.shape != want.shape:
        raise Finding(f"{what}: shape {list(got.shape)}, reference {list(want.shape)}")
    tol = 2e-3 * (1.0 + float(want.abs().max()) if want.numel() else 1.0)
    err = float((got.double() - want).abs().max()) if want.numel() else 0.0
    if not err <= tol:  # NaN fails too
        raise Finding(f"{what}: off by {err:.3g} (tolerance {tol:.3g})")
