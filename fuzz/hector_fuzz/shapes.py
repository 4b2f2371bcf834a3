"""The ``shapes`` strategy: argument mutation between calls of one compiled function.

Each case calls a compiled program (a handful of :mod:`hector_fuzz.programs`, compiled once
per worker) with valid arguments, then with one argument changed: a dim of its shape, its rank,
its dtype, its layout (a non-contiguous view of the same values), or the graph under it (with
rows to match, or not). The changed call must match float64 eager PyTorch or raise a clear
error (``TraceError``, ``ValueError``, ``TypeError``); a result where eager PyTorch refuses the
shapes, or a wrong one, is a finding: a kernel called with arguments it was not built for. The
valid call is repeated last: its kernel must be unharmed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

from hector_fuzz.api import ApiStrategy, Finding
from hector_fuzz.base import Environment
from hector_fuzz.cases import Case
from hector_fuzz.programs import Eager, compiled, make_graph, make_program, within

__all__ = ["MUTATIONS", "ShapesStrategy"]

#: The programs and graphs the cases draw from (their kernels are reused across cases).
PROGRAMS, GRAPHS = 6, 3
#: The kinds of change made to one argument.
MUTATIONS = ("dim", "rank-drop", "rank-add", "dtype", "layout", "graph", "graph-rows")
_DTYPES = ("float16", "bfloat16", "float64", "int32", "bool")


def _result(fn: Any, g: Any, args: list[torch.Tensor]) -> list[torch.Tensor] | None:
    """The compiled function's results, or None when it raised a clear error."""
    import hector

    try:
        out = fn(g, *args)
    except (hector.TraceError, ValueError, TypeError):
        return None
    return list(out) if isinstance(out, tuple) else [out]


def _reference(seed: int, g: Any, args: list[torch.Tensor]) -> list[torch.Tensor] | None:
    """The float64 eager results, or None when eager PyTorch refuses these arguments."""
    try:
        out = make_program(seed).run(Eager(g), args[0].double(), [a.double() for a in args[1:]])
    except (RuntimeError, IndexError, ValueError):
        return None
    return list(out) if isinstance(out, tuple) else [out]


def _changed(t: torch.Tensor, how: str, rng: random.Random) -> torch.Tensor:
    """``t`` with one change of kind ``how`` (not the graph ones)."""
    shape = list(t.shape)
    if how == "dim":
        shape[rng.randrange(len(shape))] = rng.randint(0, 6)
    elif how == "rank-drop":
        shape = shape[1:] if len(shape) > 1 else [*shape, 1]
    elif how == "rank-add":
        shape.insert(rng.randint(0, len(shape)), rng.randint(1, 3))
    if how == "dtype":
        dtype = getattr(torch, rng.choice(_DTYPES))
        return (t * 4).to(dtype) if dtype in (torch.int32, torch.bool) else t.to(dtype)
    if how == "layout":  # the same values, transposed storage
        return t.t().contiguous().t() if t.dim() == 2 else t[..., None].expand(*t.shape, 2)[..., 0]
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    return torch.randn(shape, generator=gen)


class ShapesStrategy(ApiStrategy):
    """One argument of a compiled function changed between two calls."""

    name = "shapes"
    weight = 3

    def cases(self, rng: random.Random, count: int, env: Environment) -> Iterator[Case]:
        """``count`` cases: a program, a graph, an argument and a change."""
        for i in range(count):
            program = rng.randrange(PROGRAMS)
            params = {
                "program": program,
                "graph": rng.randrange(GRAPHS),
                "arg": rng.randrange(1 + len(make_program(program).weights)),
                "mutation": rng.choice(MUTATIONS),
                "seed": rng.randrange(1 << 30),
            }
            yield self.make_case(i, f"program {program}: {params['mutation']}", params)

    def check(self, params: dict[str, Any]) -> bool:
        """The valid call, the changed one, the valid one again."""
        seed, how = int(params["program"]), str(params["mutation"])
        rng = random.Random(int(params["seed"]))
        g = make_graph(int(params["graph"]))
        gen = torch.Generator().manual_seed(int(params["seed"]))
        valid = [torch.randn(s, generator=gen) for s in make_program(seed).shapes(g.num_nodes)]
        fn = compiled(seed)
        self._agree(fn, seed, g, valid, required=True)
        args, g2 = list(valid), g
        if how.startswith("graph"):
            g2 = make_graph(int(params["graph"]) + 1 + rng.randrange(GRAPHS))
            if how == "graph-rows":  # the node features follow the graph: a valid call
                args[0] = torch.randn(g2.num_nodes, args[0].shape[1], generator=gen)
        else:
            at = int(params["arg"])
            args[at] = _changed(args[at], how, rng)
        accepted = self._agree(fn, seed, g2, args, required=how in ("layout", "graph-rows"))
        self._agree(fn, seed, g, valid, required=True)
        return accepted

    @staticmethod
    def _agree(fn: Any, seed: int, g: Any, args: list[torch.Tensor], required: bool) -> bool:
        """Whether ``fn`` accepted ``args`` (then matching the reference); raises
        :class:`Finding` for a wrong result, a result eager refuses, or a refused ``required``
        call."""
        got = _result(fn, g, args)
        if got is None:
            if required:
                raise Finding(f"a valid call was refused: {[tuple(a.shape) for a in args]}")
            return False
        want = _reference(seed, g, args)
        if want is None:
            shapes = [(tuple(a.shape), str(a.dtype)) for a in args]
            raise Finding(f"ran arguments eager PyTorch refuses: {shapes}")
        half = any(a.dtype in (torch.float16, torch.bfloat16) for a in args)
        for k, (o, w) in enumerate(zip(got, want, strict=True)):
            if half:  # computed in float32 from half inputs, maybe written as half
                o, w = o.float(), w.float()
                if not torch.allclose(o, w, atol=5e-2 * (1 + float(w.abs().max())), rtol=5e-2):
                    raise Finding(f"result {k} off with half arguments")
                continue
            within(o, w, f"result {k} for shapes {[tuple(a.shape) for a in args]}")
        return True
