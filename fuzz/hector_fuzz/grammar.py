"""Grammar-based generation for the fuzzer: whole modules from the dialects' op specs, and
random builtin attributes, types, locations and resources.

:class:`SpecModule` reads each op's operands, results and attributes from
``hector.dialects.SPECS`` and writes ``func.func`` bodies of generic-form Hector ops, mostly
well typed (graph, tensor and memref operands of agreeing shapes, every attribute of its kind)
and, with probability ``ill``, deliberately not (a value of the wrong type, a missing or extra
operand, an attribute of the wrong kind or value, odd shapes). :class:`BuiltinGrammar` writes
random builtin attributes and types (arrays, dictionaries, affine maps and sets, function
types, dense elements, resources, locations) of bounded depth.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hector_fuzz.base import Environment, Strategy
from hector_fuzz.cases import Case

if TYPE_CHECKING:
    from hector.dialects import OpDef

__all__ = [
    "BuiltinGrammar",
    "GrammarStrategy",
    "SpecModule",
    "dialect_pipelines",
    "resource_section",
]

_ELEMENTS = ["f32", "f32", "f32", "f16", "bf16", "f64", "i32", "i64", "index", "i1"]
_INTS = ["0", "1", "-1", "2", "8", "64", "128", "256", "1024", "1025", "2147483648",
         "9223372036854775807", "-9223372036854775808"]  # fmt: skip
_FLOATS = ["0.0", "0.2", "-1.5", "1.0e+300", "0x7FC00000", "0x7F800000", "-0.0"]


def _ops(dialect: str) -> list[tuple[str, OpDef]]:
    from hector.dialects import SPECS

    return [(name, op) for name, op in SPECS.items() if name.startswith(dialect + ".")]


#: The pipelines a module of each dialect's ops is worth running through.
_DIALECT_PIPELINES = {
    "hector_inter": ["hector-optimize", "hector-lower-cpu", "convert-hector-inter-to-intra",
                     "hector-autodiff", "hector-fuse", "hector-compact-materialization",
                     "hector-linear-reorder", "hector-aggregation-order", "hector-dce-cse",
                     "convert-hector-inter-to-intra, hector-schedule{target=gpu}",
                     "convert-hector-inter-to-intra, convert-hector-intra-to-gpu",
                     "hector-autodiff, placement-plan-saved"],
    "hector_intra": ["hector-schedule", "hector-schedule{target=gpu}", "hector-profile-kernels",
                     "convert-hector-intra-to-scf", "convert-hector-intra-to-gpu",
                     "hector-schedule, convert-hector-intra-to-scf, hector-lower-llvm-cpu"],
    "placement": ["placement-infer-unified", "placement-plan-offload",
                  "convert-placement-to-runtime", "placement-plan-offload{policy=all}"],
}  # fmt: skip


def resource_section(blob: str) -> str:
    """A ``dialect_resources`` section holding one builtin blob ``blob1`` of text ``blob``."""
    inner = f'    builtin: {{\n      blob1: "{blob}"\n    }}\n'
    return f"{{-#\n  dialect_resources: {{\n{inner}  }}\n#-}}\n"


def dialect_pipelines(dialect: str) -> list[str]:
    """Pipelines a module of ``dialect``'s ops is worth running through."""
    return _DIALECT_PIPELINES[dialect]


@dataclass
class SpecModule:
    """One function of random ops of one dialect, built from the specs.

    ``dims`` are the feature sizes to draw from (``?`` and huge ones are allowed); ``ill`` is
    the probability of each deliberate typing mistake."""

    rng: random.Random
    dialect: str
    ill: float = 0.15
    dims: Sequence[str] = ("1", "2", "8", "16", "64")
    args: list[tuple[str, str]] = field(default_factory=list)
    values: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    feature: str = "16"  # the feature size of this function's values
    slice: str = ""  # the slice attribute of the op being built
    weights: bool = False  # whether the op being built works on weights only

    def _bad(self) -> bool:
        return self.rng.random() < self.ill

    def _dim(self) -> str:
        return self.rng.choice(self.dims)

    def _shape(self, rank: int, rows: str = "?") -> str:
        dims = [rows] + [self.feature for _ in range(rank - 1)]
        if self._bad():
            dims = [self._dim() for _ in range(self.rng.choice([0, 1, 2, 3, 4]))]
        elem = self.rng.choice(_ELEMENTS) if self._bad() else "f32"
        return "x".join([*dims, elem])

    def fresh_type(self, constraint: str, role: str) -> str:
        """A type for an operand of ``constraint`` named ``role``, of agreeing shape."""
        if constraint == "hector_inter.graph":
            return "!hector_inter.graph"
        kind = "memref" if constraint == "memref" else "tensor"
        if constraint == "any":
            kind = self.rng.choice(["tensor", "memref"])
        if "index" in role:
            return f"{kind}<?xi32>"
        if role in ("weight", "w", "dw") or self.weights:
            # A weight has no rows: static even where the features are dynamic.
            size = self.feature if self.feature != "?" else self.rng.choice(["8", "16"])
            shaped = f"{size}x{size}xf32"
            shaped = shaped if '"none"' in self.slice else f"3x{shaped}"
            return f"{kind}<{self._shape(3, '3') if self._bad() else shaped}>"
        if role == "s" or role == "row_scale":
            return f"{kind}<?x1xf32>"
        return f"{kind}<{self._shape(2)}>"

    def _wrong_type(self) -> str:
        return self.rng.choice(
            ["!hector_inter.graph", "tensor<?x?xf32>", "memref<?xf32>", "i32", "f32",
             "tensor<*xf32>", "vector<4xf32>", "tuple<>", "none", f"tensor<{self.feature}xi8>"]
        )  # fmt: skip

    def operand(self, constraint: str, role: str) -> tuple[str, str]:
        """An existing value that fits (usually) or a new function argument."""
        wanted = self._wrong_type() if self._bad() else self.fresh_type(constraint, role)
        pool = self.values.get(wanted, [])
        if pool and (wanted == "!hector_inter.graph" or self.rng.random() < 0.8):
            return self.rng.choice(pool)
        name = f"%a{len(self.args)}"
        self.args.append((name, wanted))
        self.values.setdefault(wanted, []).append((name, wanted))
        return name, wanted

    def attribute(self, kind: str, values: Sequence[str]) -> str:
        """An attribute value of ``kind`` (an enum's value, an int, a float, a bool)."""
        r = self.rng
        if self._bad():
            return r.choice(['"bogus"', '""', "1 : i64", "1.0 : f32", "unit", "[]", "true",
                             f"{r.choice(_INTS)} : i32", "@sym", "array<i32: 1>"])  # fmt: skip
        if kind == "enum":
            return f'"{r.choice(values)}"'
        if kind == "int":
            return f"{r.choice(_INTS[:10])} : i64"
        if kind == "float":
            return f"{r.choice(_FLOATS[:3])} : f32"
        return r.choice(["true", "false"])

    def op(self, name: str, spec: OpDef) -> None:
        """Append one op of ``spec`` to the function."""
        r = self.rng
        attrs = [
            f"{a.name} = {self.attribute(a.kind, a.values)}"
            for a in spec.attributes
            if not (self._bad() and r.random() < 0.3)
        ]
        # Shapes follow the attributes: a shared weight (slice = "none") is [K, N]; the
        # operands and results of weight ops (weight_product, ...) are all weights.
        self.slice = " ".join(a for a in attrs if a.startswith("slice"))
        self.weights = "weight" in name
        operands: list[tuple[str, str]] = []
        segments: list[int] = []
        for o in spec.operands:
            take = o.variadicity == "single" or r.random() < 0.5
            if self._bad():
                take = not take
            segments.append(int(take))
            if take:
                operands.append(self.operand(o.constraint, o.name))
        if self._bad() and operands:
            operands.insert(r.randrange(len(operands) + 1), r.choice(operands))
        if sum(o.variadicity != "single" for o in spec.operands) > 1 or self._bad():
            attrs.append(f"operandSegmentSizes = array<i32: {', '.join(map(str, segments))}>")
        results = [self._result_type(o.constraint, operands) for o in spec.results]
        names = [f"%v{len(self.lines)}_{i}" for i in range(len(results))]
        lhs = f"{', '.join(names)} = " if names else ""
        attr_text = f" {{{', '.join(attrs)}}}" if attrs else ""
        args = ", ".join(n for n, _ in operands)
        types = ", ".join(t for _, t in operands)
        self.lines.append(
            f'    {lhs}"{name}"({args}){attr_text} : ({types}) -> ({", ".join(results)})'
        )
        for n, t in zip(names, results, strict=True):
            self.values.setdefault(t, []).append((n, t))

    def _result_type(self, constraint: str, operands: list[tuple[str, str]]) -> str:
        if self.weights:
            return self.fresh_type(constraint, "weight")
        rows = [t for _, t in operands if t.startswith(("tensor<?x", "memref<?x"))]
        if rows and not self._bad() and self.rng.random() < 0.8:
            return rows[0]
        return self.fresh_type(constraint, "out")

    def render(self, count: int) -> str:
        """A module with one function of ``count`` random ops of the dialect."""
        self.feature = self._dim()
        ops = _ops(self.dialect)
        for _ in range(count):
            self.op(*self.rng.choice(ops))
        returned = self._returnable()
        names = ", ".join(n for n, _ in returned)
        types = ", ".join(t for _, t in returned)
        sig = ", ".join(f"{n}: {t}" for n, t in self.args)
        ret = f"({types})"
        body = "\n".join(self.lines)
        tail = f"    return {names} : {types}" if returned else "    return"
        return f"func.func @f({sig}) -> {ret} {{\n{body}\n{tail}\n}}\n"

    def _returnable(self) -> list[tuple[str, str]]:
        last = [(n, t) for pool in self.values.values() for n, t in pool if n.startswith("%v")]
        last.sort(key=lambda v: int(v[0][2:].split("_")[0]))
        return last[-1:] if last and self.rng.random() < 0.8 else []


class BuiltinGrammar:
    """Random builtin attributes and types, nested at most ``depth`` deep."""

    def __init__(self, rng: random.Random, depth: int = 4) -> None:
        self.rng = rng
        self.depth = depth

    def type(self, depth: int = 0) -> str:
        """A random builtin type."""
        r = self.rng
        leaf = ["f32", "f16", "bf16", "f64", "f8E4M3FN", "i1", "i8", "i64", "index", "none",
                "ui16", "si32", "i0", "i17", "!hector_inter.graph", "complex<f32>"]  # fmt: skip
        if depth >= self.depth or r.random() < 0.4:
            return r.choice(leaf)
        d = depth + 1
        dims = "x".join(r.choice(["?", "0", "1", "4", "16"]) for _ in range(r.randint(0, 3)))
        dims = dims + "x" if dims else ""
        makers = [
            lambda: f"tensor<{dims}{self.type(d)}>",
            lambda: f"tensor<*x{self.type(d)}>",
            lambda: f"memref<{dims}{r.choice(['f32', 'i32', 'index'])}>",
            lambda: f"memref<{dims}f32, strided<[{r.choice(['1', '?', '0'])}], offset: ?>>",
            lambda: f"memref<{dims}f32, {self.affine_map(d)}>",
            lambda: f"memref<4xf32, {r.choice(['1', '3', '#gpu.address_space<workgroup>'])}>",
            lambda: f"vector<{r.choice(['4', '[4]', '2x[8]', '0', '1x1'])}x{r.choice(leaf[:9])}>",
            lambda: f"tuple<{', '.join(self.type(d) for _ in range(r.randint(0, 3)))}>",
            lambda: self.function_type(d),
            lambda: f"complex<{self.type(d)}>",
            lambda: f"tensor<{dims}f32, {self.attr(d)}>",
        ]
        return r.choice(makers)()

    def function_type(self, depth: int) -> str:
        """``(inputs) -> results``."""
        r = self.rng
        ins = ", ".join(self.type(depth) for _ in range(r.randint(0, 3)))
        outs = [self.type(depth) for _ in range(r.randint(0, 2))]
        out = outs[0] if len(outs) == 1 and not outs[0].startswith("(") else f"({', '.join(outs)})"
        return f"({ins}) -> {out}"

    def affine_expr(self, dims: int, syms: int, depth: int) -> str:
        """An affine expression over ``d0..``, ``s0..``."""
        r = self.rng
        atoms = [f"d{i}" for i in range(dims)] + [f"s{i}" for i in range(syms)]
        atoms += [str(r.choice([0, 1, -1, 2, 7, 2**63 - 1, 2**62]))]
        if depth >= self.depth or r.random() < 0.4:
            return r.choice(atoms)
        a, b = self.affine_expr(dims, syms, depth + 1), self.affine_expr(dims, syms, depth + 1)
        op = r.choice(["+", "-", "*", "floordiv", "ceildiv", "mod"])
        return f"({a} {op} {b})" if op in "+-*" else f"({a} {op} {r.choice(['2', '0', '-3'])})"

    def affine_map(self, depth: int = 0) -> str:
        """``affine_map<(d..)[s..] -> (...)>``."""
        r = self.rng
        dims, syms = r.randint(0, 3), r.randint(0, 2)
        head = f"({', '.join(f'd{i}' for i in range(dims))})"
        head += f"[{', '.join(f's{i}' for i in range(syms))}]" if syms else ""
        exprs = ", ".join(self.affine_expr(dims, syms, depth) for _ in range(r.randint(0, 3)))
        return f"affine_map<{head} -> ({exprs})>"

    def dense(self) -> str:
        """``dense<...> : tensor<...>`` (sometimes of mismatching shape)."""
        r = self.rng
        n = r.choice([0, 1, 2, 3])
        elem = r.choice(["f32", "i32", "i1", "i8", "f16", "index", "complex<f32>"])
        values = r.choice(["1", "0.5", "true", "[1, 2]", "[[1], [2]]", '"0x0102"', "(1, 2)", ""])
        return f"dense<{values}> : {r.choice(['tensor', 'vector'])}<{n}x{elem}>"

    def location(self, depth: int = 0) -> str:
        """A location: file, name, callsite, fused or unknown."""
        r = self.rng
        if depth >= self.depth or r.random() < 0.4:
            return r.choice(['"a.py":1:2', "unknown", '"n"', '"f":0:0', '"x":4294967296:1',
                             '"r":1:2 to 1:4'])  # fmt: skip
        d = depth + 1
        return r.choice([
            f'"name"({self.location(d)})',
            f"callsite({self.location(d)} at {self.location(d)})",
            f"fused[{', '.join(self.location(d) for _ in range(r.randint(0, 3)))}]",
            f"fused<{self.attr(d)}>[{self.location(d)}]",
        ])  # fmt: skip

    def attr(self, depth: int = 0) -> str:
        """A random builtin attribute."""
        r = self.rng
        leaves = ["unit", "true", "0 : i64", "-1 : i8", "1.5 : f32", '"s"', '""', "@sym",
                  "@a::@b", "0x7FC00000 : f32", "array<i32: 1, 2>", "array<f64>",
                  "#hector_inter.nothing", "dense_resource<blob1> : tensor<2xi32>",
                  "affine_set<(d0) : (d0 >= 0)>", "#builtin.int<1>", "strided<[1, ?]>"]  # fmt: skip
        if depth >= self.depth or r.random() < 0.3:
            return r.choice([*leaves, self.type(depth)])
        d = depth + 1
        makers = [
            lambda: f"[{', '.join(self.attr(d) for _ in range(r.randint(0, 3)))}]",
            lambda: self.dictionary(d),
            lambda: self.affine_map(d),
            lambda: self.dense(),
            lambda: f"loc({self.location(d)})",
            lambda: self.type(d),
            lambda: f"{r.choice(_INTS)} : {r.choice(['i1', 'i8', 'i64', 'index', 'i128'])}",
        ]
        return r.choice(makers)()

    def dictionary(self, depth: int) -> str:
        """``{k0 = ..., ...}``."""
        entries = (f"k{i} = {self.attr(depth)}" for i in range(self.rng.randint(0, 3)))
        return "{" + ", ".join(entries) + "}"

    def resources(self) -> str:
        """A ``dialect_resources`` section (alignment prefix, odd sizes and alignments)."""
        r = self.rng
        align = r.choice(["01000000", "02000000", "04000000", "08000000", "00000000",
                          "03000000", "00000080", "ffffffff"])  # fmt: skip
        payload = "".join(r.choice("0123456789abcdef") for _ in range(2 * r.randint(0, 16)))
        return resource_section(f"0x{align}{payload}")

    def module(self) -> str:
        """A module carrying random attributes, types and locations, with resources."""
        r = self.rng
        attrs = ", ".join(f"fuzz.a{i} = {self.attr()}" for i in range(r.randint(1, 3)))
        decl = ", ".join(self.type() for _ in range(r.randint(0, 3)))
        text = (
            f"module attributes {{{attrs}}} {{\n"
            f"  func.func private @decl({decl}) -> {self.type()} attributes {{x = {self.attr()}}}\n"
            f"  func.func @f() {{\n    return loc({self.location()})\n  }} loc({self.location()})\n"
            "}\n"
        )
        return text + (self.resources() if r.random() < 0.4 else "")


class GrammarStrategy(Strategy):
    """Modules of random ops of each dialect from the specs (three in four cases; half of
    them through a pipeline), or of random builtin attributes and types."""

    name = "grammar"
    weight = 3

    def cases(self, rng: random.Random, count: int, env: Environment) -> Iterator[Case]:
        """Spec-generated and builtin-grammar cases."""
        dialects = ["hector_inter", "hector_inter", "hector_intra", "placement"]
        for _ in range(count):
            if rng.random() < 0.25:
                text = BuiltinGrammar(rng, rng.choice([2, 3, 5])).module()
                yield Case(0, "grammar:builtin", text)
                continue
            dialect = rng.choice(dialects)
            ill = rng.choice([0.0, 0.0, 0.05, 0.2])
            text = SpecModule(rng, dialect, ill=ill).render(rng.randint(1, 8))
            pipeline = rng.choice(dialect_pipelines(dialect)) if rng.random() < 0.5 else ""
            yield Case(0, f"grammar:{dialect}", text, pipeline)
