"""Depth and size extremes for the fuzzer: a registry of :class:`Extreme` generators.

Each generator writes one input at an extreme of the grammar: a bracket kind nested
:data:`DEPTHS` deep (arrays, tuples, dictionaries, affine parentheses, function types, locations,
modules, regions), a dimension at an integer boundary (:data:`DIMS`) carried through a lowering,
a very long identifier, very many ops, a huge integer literal, a resource blob of odd alignment
or size, or a bare-dialect op name after other text on the same line.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hector_fuzz.base import Environment, Strategy
from hector_fuzz.cases import Case
from hector_fuzz.grammar import SpecModule, dialect_pipelines, resource_section

__all__ = ["DEPTHS", "DIMS", "EXTREMES", "Extreme", "ExtremesStrategy"]

#: Nesting depths: fine, deep for Python's recursion, deep for MLIR's C++ stack.
DEPTHS = (100, 1000, 3000, 10000)
#: Dimension sizes at integer boundaries (and dynamic).
DIMS = ("0", "1", "2147483647", "2147483648", "4294967296", "4611686018427387904",
        "9223372036854775807", "9223372036854775808", "?")  # fmt: skip

#: (text, pipeline, flags) of one generated input.
Made = tuple[str, str, tuple[str, ...]]


@dataclass(frozen=True)
class Extreme:
    """One kind of extreme input: ``make(rng)`` writes it."""

    name: str
    make: Callable[[random.Random], Made]


def _depth(rng: random.Random) -> int:
    return rng.choice(DEPTHS)


def _attr(value: str) -> str:
    return f"module attributes {{fuzz.a = {value}}} {{}}\n"


def _loc(location: str) -> str:
    return f"module {{}} loc({location})\n"


def _nest(open_: str, inner: str, close: str, depth: int) -> str:
    return open_ * depth + inner + close * depth


#: Bracket kinds nested ``depth`` deep, each as a whole input.
_NESTINGS: dict[str, Callable[[int], str]] = {
    "array": lambda d: _attr(_nest("[", "", "]", d)),
    "dictionary": lambda d: _attr(_nest("{a = ", "1", "}", d)),
    "tuple": lambda d: _attr(_nest("tuple<", "i32", ">", d)),
    "tensor-of-complex": lambda d: _attr(_nest("complex<", "f32", ">", d)),
    "affine-parens": lambda d: _attr(f"affine_map<(d0) -> ({_nest('(', 'd0', ')', d)})>"),
    "affine-sum": lambda d: _attr(f"affine_map<(d0) -> ({' + '.join(['d0'] * d)})>"),
    "function-type": lambda d: _attr(_nest("() -> (", "i32", ")", d)),
    "location-callsite": lambda d: _loc(_nest("callsite(", '"a":1:1', ' at "b":2:2)', d)),
    "location-fused": lambda d: _loc(_nest("fused[", "unknown", "]", d)),
    "location-name": lambda d: _loc(_nest('"n"(', "unknown", ")", d)),
    "module": lambda d: _nest("module {\n", "", "}\n", d),
    "region": lambda d: (
        "func.func @f() {\n"
        + _nest('"scf.execute_region"() ({\n', "", '"scf.yield"() : () -> ()\n}) : () -> ()\n', d)
        + "return\n}\n"
    ),
    "dense": lambda d: _attr(f"dense<{_nest('[', '1', ']', d)}> : tensor<{'1x' * d}i32>"),
    "type-attr": lambda d: _attr(_nest("tensor<1x", "f32", ">", d)),
}


def _nesting(kind: str) -> Extreme:
    return Extreme(f"nesting-{kind}", lambda rng: (_NESTINGS[kind](_depth(rng)), "", ()))


def _dims(rng: random.Random) -> Made:
    """Hector ops whose shapes carry boundary dims, through a lowering most of the time."""
    dialect = rng.choice(["hector_inter", "hector_inter", "hector_intra"])
    module = SpecModule(rng, dialect, ill=0.0, dims=[rng.choice(DIMS), rng.choice(DIMS)])
    text = module.render(rng.randint(1, 4))
    huge = rng.choice(DIMS)
    text = text.replace("<?x", f"<{huge}x") if rng.random() < 0.5 else text
    pipeline = rng.choice(dialect_pipelines(dialect)) if rng.random() < 0.7 else ""
    return text, pipeline, ()


def _dynamic_schedule(rng: random.Random) -> Made:
    """An op's spec example (a valid function) with its row-indexed values' feature dims made
    dynamic (``tensor<?x?xf32>``, ``memref<?x?xf32>``; weights stay static), through
    ``hector-schedule`` and the lowerings around it."""
    from hector.dialects import SPECS

    name, spec = rng.choice([(n, op) for n, op in SPECS.items() if op.example and "_" in n])
    text = re.sub(r"(?<=<\?x)\d+(?=x)", "?", spec.example) + "\n"
    schedule = rng.choice(["hector-schedule", "hector-schedule{target=gpu}",
                           "hector-schedule{threads=8}"])  # fmt: skip
    lower = "convert-hector-inter-to-intra, " if name.startswith("hector_inter.") else ""
    after = rng.choice(["", ", convert-hector-intra-to-scf", ", convert-hector-intra-to-gpu"])
    return text, lower + schedule + after, ()


def _overflowing_shapes(rng: random.Random) -> Made:
    """An op's spec example with its dims replaced by huge ones (each fits in int64, their
    product does not; each distinct type rewritten the same way everywhere), through a
    lowering."""
    from hector.dialects import SPECS

    name, spec = rng.choice([(n, op) for n, op in SPECS.items() if op.example and "_" in n])
    big = rng.choice(["4294967296", "2147483648", "4611686018427387904", "9223372036854775807"])
    text = spec.example + "\n"
    for shaped in sorted(set(re.findall(r"(?:tensor|memref)<[^<>]*>", text))):
        grown = re.sub(
            r"(?<=[<x])(\?|\d+)(?=x)", lambda m: big if rng.random() < 0.8 else m[0], shaped
        )
        text = text.replace(shaped, grown)
    inter = name.startswith("hector_inter.")
    pipelines = ["hector-lower-cpu", "convert-hector-inter-to-intra", "hector-lower-gpu",
                 "hector-optimize", "hector-autodiff"] if inter else [
                 "hector-schedule, convert-hector-intra-to-scf", "convert-hector-intra-to-gpu",
                 "hector-schedule{target=gpu}"]  # fmt: skip
    return text, rng.choice(pipelines), ()


def _builtin_dims(rng: random.Random) -> Made:
    dims = "x".join(rng.choice(DIMS) for _ in range(rng.randint(1, 4)))
    kind = rng.choice(["tensor", "memref", "vector"])
    return f"func.func private @f({kind}<{dims}xf32>) -> ()\n", "", ()


def _long_identifier(rng: random.Random) -> Made:
    name = rng.choice("abxz_") * rng.choice([1000, 100_000, 1_000_000])
    return rng.choice([
        f"func.func @{name}() {{\n  return\n}}\n",
        f"func.func @f(%{name}: i32) -> i32 {{\n  return %{name} : i32\n}}\n",
        _attr(f'"{name}"'),
        f"module attributes {{{name} = unit}} {{}}\n",
        f"func.func @f(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {{\n"
        f'  %0 = "hector_inter.unary"(%x) {{fn = "{name}", slope = 0.0 : f32}}'
        " : (tensor<?x8xf32>) -> tensor<?x8xf32>\n  return %0 : tensor<?x8xf32>\n}\n",
    ]), "", ()  # fmt: skip


def _many_ops(rng: random.Random) -> Made:
    """A chain of thousands of ops; the full lowerings (linear, ~6 ms an op) get 1,000 so a
    case stays well inside the timeout."""
    pipeline = rng.choice(["", "", "hector-fuse", "hector-autodiff", "hector-lower-cpu"])
    n = rng.choice([1000, 5000]) if pipeline in ("", "hector-fuse") else 1000
    lines = ["func.func @f(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {"]
    prev = "%x"
    for i in range(n):
        lines.append(
            f'  %v{i} = "hector_inter.unary"({prev}) {{fn = "relu", slope = 0.0 : f32}}'
            " : (tensor<?x8xf32>) -> tensor<?x8xf32>"
        )
        prev = f"%v{i}"
    lines += [f"  return {prev} : tensor<?x8xf32>", "}"]
    return "\n".join(lines) + "\n", pipeline, ()


def _huge_literal(rng: random.Random) -> Made:
    digits = "9" * rng.choice([20, 40, 400, 4000, 100_000])
    return rng.choice([
        _attr(f"{digits} : i64"),
        _attr(f"-{digits} : i{rng.choice([1, 8, 64, 128, 16777215])}"),
        _attr(f"{digits}.5e{digits} : f32"),
        _attr(f"array<i64: {digits}>"),
        _attr(f"dense<{digits}> : tensor<2xi32>"),
        _attr(f"0 : i{rng.choice(['16777215', '16777216', digits])}"),
        _attr(f"affine_map<(d0) -> (d0 * {digits})>"),
        f'module {{}} loc("f":{digits}:{digits})\n',
    ]), "", ()  # fmt: skip


def _blob(rng: random.Random) -> Made:
    """A resource blob whose alignment prefix is 0, odd, huge, or missing bytes."""
    align = rng.choice(["00000000", "03000000", "00000001", "ffffffff", "000000", "", "01"])
    size = rng.choice([0, 1, 3, 4, 7, 64, 4096])
    body = "0x" + align + "ab" * size
    user = rng.choice(["", "fuzz.a = dense_resource<blob1> : tensor<2xi32>"])
    return f"module attributes {{{user}}} {{}}\n" + resource_section(body), "", ()


def _bare_dialect(rng: random.Random) -> Made:
    """An op named by a dialect alone, written after other text on the same line."""
    dialect = rng.choice(["gpu", "func", "scf", "builtin", "hector_inter", "llvm", "arith"])
    before = rng.choice(["module {} ", "module {\n} ", "// c\nmodule {} ", "module { } ", ""])
    op = f'"{dialect}"() : () -> ()'
    if rng.random() < 0.3:
        return f"module {{ func.func @f() {{ {op} return }} }}\n", "", ()
    return before + op + "\n", "", ()


#: Every extreme generator, by name.
EXTREMES: dict[str, Extreme] = {
    e.name: e
    for e in [
        *(_nesting(kind) for kind in _NESTINGS),
        Extreme("dims-lowered", _dims),
        Extreme("dims-dynamic-schedule", _dynamic_schedule),
        Extreme("dims-overflow-lowered", _overflowing_shapes),
        Extreme("dims-builtin", _builtin_dims),
        Extreme("long-identifier", _long_identifier),
        Extreme("many-ops", _many_ops),
        Extreme("huge-literal", _huge_literal),
        Extreme("resource-blob", _blob),
        Extreme("bare-dialect-op", _bare_dialect),
    ]
}


class ExtremesStrategy(Strategy):
    """One input per case from a generator of :data:`EXTREMES` (dims-lowered: three times as
    often as the others)."""

    name = "extremes"
    weight = 1

    def cases(self, rng: random.Random, count: int, env: Environment) -> Iterator[Case]:
        """Extreme inputs; each case's origin names its generator."""
        names = [*EXTREMES, "dims-lowered", "dims-lowered"]
        for _ in range(count):
            extreme = EXTREMES[rng.choice(names)]
            text, pipeline, flags = extreme.make(rng)
            yield Case(0, f"extremes:{extreme.name}", text, pipeline, flags=flags)
