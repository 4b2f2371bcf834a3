"""The ``differential`` strategy: random graph-API programs (:mod:`hector_fuzz.programs`)
compiled with ``@hector.compile`` and checked against a float64 eager reference, forward and
gradients of every argument, with the optimization switches as metamorphic relations.

A case is a program of a small pool (so compiled kernels are reused: in the worker, and across
workers through the persistent compilation cache), a graph of a small pool, fresh argument
values and two settings of the switches (``compact``, ``reorder``, ``fuse``): the results and
gradients of both must match the reference and each other. A mismatch is a silent wrong
result, a finding; a TraceError would be the generator's fault and is a finding too.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

from hector_fuzz.api import ApiStrategy, Finding
from hector_fuzz.base import Environment
from hector_fuzz.cases import Case
from hector_fuzz.programs import Eager, Program, compiled, make_graph, make_program, within

__all__ = ["SWITCHES", "DifferentialStrategy"]

#: Every setting of (compact, reorder, fuse).
SWITCHES = tuple((c, r, f) for c in (True, False) for r in (True, False) for f in (True, False))
#: Programs and graphs a campaign draws from.
PROGRAMS, GRAPHS = 8, 2


def _outputs(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple) else [out]


def _backward(outs: list[torch.Tensor], lw: list[torch.Tensor]) -> None:
    """Back-propagate ``sum(out * lw)`` over the results that take a gradient (a result
    that depends on no argument, e.g. a degree norm summed, takes none)."""
    terms = [(o * w.to(o.dtype)).sum() for o, w in zip(outs, lw, strict=True) if o.requires_grad]
    if terms:
        sum(terms).backward()  # type: ignore[union-attr]


#: Results and each argument's gradient (None: it takes none).
Run = tuple[list[torch.Tensor], list[torch.Tensor | None]]


def _reference(program: Program, g: Any, args: list[torch.Tensor], lw: list[torch.Tensor]) -> Run:
    ref = [a.double().requires_grad_() for a in args]
    outs = _outputs(program.run(Eager(g), ref[0], ref[1:]))
    _backward(outs, lw)
    return [o.detach() for o in outs], [r.grad for r in ref]


def _run(fn: Any, g: Any, args: list[torch.Tensor], lw: list[torch.Tensor]) -> Run:
    mine = [a.clone().requires_grad_() for a in args]
    outs = _outputs(fn(g, *mine))
    _backward(outs, lw)
    return [o.detach() for o in outs], [m.grad for m in mine]


class DifferentialStrategy(ApiStrategy):
    """Random programs against a float64 reference, two switch settings per case."""

    name = "differential"

    def cases(self, rng: random.Random, count: int, env: Environment) -> Iterator[Case]:
        """``count`` cases: a program, a graph, a values seed and two switch settings."""
        for i in range(count):
            a, b = rng.sample(range(len(SWITCHES)), 2)
            params = {
                "program": rng.randrange(PROGRAMS),
                "graph": rng.randrange(GRAPHS),
                "values": rng.randrange(1 << 30),
                "switches": [list(SWITCHES[a]), list(SWITCHES[b])],
            }
            yield self.make_case(i, f"program {params['program']}", params)

    def check(self, params: dict[str, Any]) -> bool:
        """Both switch settings match the reference (results and every gradient)."""
        program = make_program(int(params["program"]))
        g = make_graph(int(params["graph"]))
        gen = torch.Generator().manual_seed(int(params["values"]))
        args = [torch.randn(s, generator=gen) for s in program.shapes(g.num_nodes)]
        want: list[torch.Tensor] = []
        want_grads: list[torch.Tensor | None] = []
        for switches in params["switches"]:
            fn = compiled(int(params["program"]), tuple(switches))
            if not want:
                probe = _outputs(fn(g, *args))  # inference kernel first: the loss weights
                lw = [torch.randn(o.shape, generator=gen) for o in probe]
                want, want_grads = _reference(program, g, args, lw)
                for k, (o, w) in enumerate(zip(probe, want, strict=True)):
                    within(o, w, f"inference result {k} with {switches}")
            outs, grads = _run(fn, g, args, lw)
            for k, (o, w) in enumerate(zip(outs, want, strict=True)):
                within(o, w, f"training result {k} with switches {switches}")
            for k, (gr, ref) in enumerate(zip(grads, want_grads, strict=True)):
                # No reference gradient: the results do not depend on it (None, or zeros).
                w = torch.zeros(args[k].shape, dtype=torch.float64) if ref is None else ref
                if gr is None and ref is None:
                    continue
                if gr is None:
                    raise Finding(f"argument {k} got no gradient with switches {switches}")
                within(gr, w, f"gradient of argument {k} with switches {switches}")
        return True
