"""The ``mutation`` strategy: the lit tests' inputs, mutated.

Each case mutates one seed (:func:`~hector_fuzz.cases.load_seeds`) a few times — numbers,
attribute values, types, op names, SSA operands, whole lines — and runs it the way a user would:
through ``hector-opt``'s parse, ``hector-verify`` and print (an *input*), or through one named
pipeline or Hector pass (a *pipeline run*; torch-dialect seeds go through the torch-context
passes with ``--torch``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hector_fuzz.base import Environment, Strategy
from hector_fuzz.cases import Case, Seed

__all__ = ["MutationStrategy", "make_cases", "mutate", "option_variants", "pipelines"]

_NUMBER = re.compile(r"(?<![\w%#@!^.])-?\d+(\.\d+)?(e[-+]?\d+)?(?![\w.])")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_SSA = re.compile(r"%[\w$.\-]+(#\d+)?")
_SCALAR_TYPE = re.compile(r"\b(f16|bf16|f32|f64|i1|i8|i16|i32|i64|index)\b")
_DIMS = re.compile(r"(?<=[<x])(\?|\d+)(?=x)")
_SHAPED = re.compile(r"\b(?:tensor|memref|vector)<[^<>]*>")
_ATTR_DICT = re.compile(r"\{(?=\s*[\w.]+\s*=)")
_GENERIC_OP_END = re.compile(r'"\w+\.\w+"\([^()]*\)(?= :)')
_ARGUMENT_END = re.compile(r"%[\w]+: [^,(){}]+?(?=[,)])")

_NUMBERS = [
    "0", "1", "-1", "2", "3", "7", "8", "16", "255", "256", "1024", "1025", "65536",
    "2147483647", "2147483648", "-2147483648", "4294967296", "9223372036854775807",
    "9223372036854775808", "-9223372036854775808", "18446744073709551616", "0.0", "-0.0",
    "1.5", "1e308", "1e400", "-1e400", "0x7FC00000", "0xFFFFFFFF",
]  # fmt: skip
_TYPES = [
    "f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64", "index", "none",
    "tensor<?xf32>", "tensor<*xf32>", "memref<?xi32>", "!hector_inter.graph", "complex<f32>",
    "vector<4xf32>", "tuple<>", "i0", "ui32", "si64",
]  # fmt: skip
_ATTRS = [
    "unit", "0 : i64", "-1 : i64", "1 : i32", "9223372036854775807 : i64", "1.0 : f32",
    '"x"', '""', "[]", "[1, 2]", "{}", "array<i32: 1, 2>", "array<i64>", "array<index: 1>",
    "array<i1: true>", "array<f32: 1.0>", "dense<1.0> : tensor<2xf32>", "dense<> : tensor<0xi32>",
    "dense<[1, 2]> : tensor<2xindex>", "@sym", "affine_map<(d0) -> (d0)>", "f32", "none",
    'dense_resource<blob> : tensor<2xi32>', "#hector_inter.nothing", 'loc("x":1:2)',
]  # fmt: skip
_NAMES = [
    "slice", "fn", "variant", "epilogue", "block_size", "tile_n", "reduce", "parallel",
    "hector.kind", "hector.fuse", "operandSegmentSizes", "slope", "heads", "sym_name",
    "function_type", "placement.write_bandwidth", "placement.forward_ns", "slice_rows",
    "placement.run_on", "hector.num_nodes", "hector.num_etypes", "align", "hector.outputs",
]  # fmt: skip


@dataclass
class _Vocabulary:
    """Words seen in the corpus, for mutations that swap one for another of its kind."""

    strings: list[str] = field(default_factory=list)
    op_names: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, seeds: Sequence[Seed]) -> _Vocabulary:
        strings: set[str] = set()
        ops: set[str] = set()
        lines: set[str] = set()
        for seed in seeds:
            for s in _STRING.findall(seed.text):
                (ops if re.fullmatch(r'"\w+\.\w+"', s) else strings).add(s)
            ops.update(re.findall(r"\b(?:func|arith|memref|linalg|scf|tensor)\.\w+", seed.text))
            lines.update(line for line in seed.text.splitlines() if len(line) < 400)
        return cls(sorted(strings), sorted(ops), sorted(lines))


def _replace_match(text: str, pattern: re.Pattern[str], rng: random.Random, new: str) -> str:
    matches = list(pattern.finditer(text))
    if not matches:
        return text
    m = rng.choice(matches)
    return text[: m.start()] + new + text[m.end() :]


def _mut_number(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    return _replace_match(text, _NUMBER, rng, rng.choice(_NUMBERS))


def _mut_string(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    pool = vocab.strings + vocab.op_names + ['""', '"\\00"', '"' + "x" * 300 + '"']
    return _replace_match(text, _STRING, rng, rng.choice(pool))


def _mut_type(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    return _replace_match(text, _SCALAR_TYPE, rng, rng.choice(_TYPES))


def _mut_dim(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    """Change one dimension of a shaped type, usually everywhere that type is written (so the
    input still parses and reaches the verifier and the passes)."""
    shapes = sorted(set(_SHAPED.findall(text)))
    if not shapes:
        return text
    old = rng.choice(shapes)
    new = _replace_match(old, _DIMS, rng, rng.choice(["?", "0", "1", "2", "3", "16", "1025"]))
    if rng.random() < 0.3:
        new = old.replace("f32", rng.choice(["f16", "f64", "i32", "index"]))
    if rng.random() < 0.7:
        return text.replace(old, new)
    return _replace_match(text, re.compile(re.escape(old)), rng, new)


def _mut_op_name(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    names = re.compile(r'"\w+\.\w+"(?=\()|\b(?:func|arith|memref|linalg|scf|tensor)\.\w+')
    new = rng.choice(vocab.op_names) if vocab.op_names else '"test.op"'
    if not new.startswith('"') and text.count('"') and rng.random() < 0.5:
        new = f'"{new}"'
    return _replace_match(text, names, rng, new)


def _mut_ssa(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    names = sorted(set(_SSA.findall(text)) | {m.group() for m in _SSA.finditer(text)})
    return _replace_match(text, _SSA, rng, rng.choice(names)) if names else text


def _mut_swap_operands(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    pairs = list(re.finditer(r"(%[\w$.\-]+), (%[\w$.\-]+)", text))
    if not pairs:
        return text
    m = rng.choice(pairs)
    return text[: m.start()] + f"{m.group(2)}, {m.group(1)}" + text[m.end() :]


def _mut_attribute(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    """Add an attribute (a name Hector reads, an odd value) to an op, a function or one of
    its arguments."""
    entry = f"{rng.choice(_NAMES)} = {rng.choice(_ATTRS)}"
    where = rng.choice([_ATTR_DICT, _GENERIC_OP_END, _ARGUMENT_END])
    matches = list(where.finditer(text))
    if not matches:
        return text
    m = rng.choice(matches)
    new = entry + ", " if where is _ATTR_DICT else " {" + entry + "}"
    return text[: m.end()] + new + text[m.end() :]


def _mut_lines(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    lines = text.splitlines()
    if len(lines) < 2:
        return text
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    action = rng.choice(["drop", "duplicate", "swap", "splice"])
    if action == "drop":
        del lines[i]
    elif action == "duplicate":
        lines.insert(j, lines[i])
    elif action == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif vocab.lines:
        lines.insert(i, rng.choice(vocab.lines))
    return "\n".join(lines) + "\n"


def _mut_truncate(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    return text[: rng.randrange(len(text) + 1)] if text else text


_MUTATIONS: list[Callable[[str, random.Random, _Vocabulary], str]] = [
    _mut_number, _mut_number, _mut_string, _mut_type, _mut_dim, _mut_dim, _mut_op_name,
    _mut_ssa, _mut_swap_operands, _mut_attribute, _mut_lines, _mut_lines, _mut_truncate,
]  # fmt: skip


def mutate(text: str, rng: random.Random, vocab: _Vocabulary, count: int) -> str:
    """``text`` after ``count`` random mutations drawn from ``rng``."""
    for _ in range(count):
        text = rng.choice(_MUTATIONS)(text, rng, vocab)
    return text


def pipelines() -> tuple[list[str], list[str]]:
    """(pipelines for Hector-dialect input, pipelines for torch-dialect input): every named
    pipeline and every registered pass (option edge values: :func:`option_variants`)."""
    from hector.passes.registry import MLIR_CONTEXT, PASSES, PIPELINES
    from hector.tools.opt import _load_passes

    _load_passes()
    hector = sorted(PIPELINES)
    torch: list[str] = []
    for name, info in sorted(PASSES.items()):
        # convert-torch-to-linalg-cpu runs in Hector's context but reads torch IR (--torch).
        takes_torch = info.context != MLIR_CONTEXT or name.startswith("convert-torch-")
        (torch if takes_torch else hector).append(name)
    return hector, torch


def option_variants() -> list[str]:
    """Every registered pass with each option set to edge values (bounds, out of range,
    malformed): each must run or be refused with a clean error."""
    from hector.passes.registry import PASSES
    from hector.tools.opt import _load_passes

    _load_passes()
    return [
        f"{name}{{{key}={value}}}"
        for name, info in sorted(PASSES.items())
        for key, option in info.options.items()
        for value in _option_values(option)
    ]


def _option_values(option: Any) -> list[str]:
    if option.type is bool:
        return ["true", "maybe"]
    if option.choices:
        return [str(c) for c in option.choices] + ["bogus"]
    return ["0", "-1", "1", "1025", "99999999999999999999", "nan", "x"]


def make_cases(seeds: Sequence[Seed], inputs: int, pipeline_runs: int, seed: int) -> Iterator[Case]:
    """``inputs`` parse-and-verify cases, then ``pipeline_runs`` pipeline cases, reproducible
    from ``seed``. Pipeline cases mutate less (one mutation, or none for a quarter of them), so
    most inputs get past the verifier into the passes."""
    rng = random.Random(seed)
    vocab = _Vocabulary.of(seeds)
    hector_pipes, torch_pipes = pipelines()
    variants = option_variants()
    # Pipelines start from the valid seeds (the tests of invalid input stop at the verifier).
    valid = [s for s in seeds if "invalid" not in s.origin and "Inputs" not in s.origin]
    plain = [s for s in valid if not s.torch]
    torch = [s for s in valid if s.torch]
    for i in range(inputs):
        s = rng.choice(seeds if rng.random() < 0.3 else valid)
        yield Case(i, s.origin, mutate(s.text, rng, vocab, rng.randint(1, 3)), "", s.torch)
    for i in range(inputs, inputs + pipeline_runs):
        use_torch = bool(torch) and rng.random() < 0.1
        s = rng.choice(torch if use_torch else plain)
        pipeline = rng.choice(torch_pipes if use_torch else hector_pipes)
        if rng.random() < 0.1:
            pipeline = rng.choice(variants)
            use_torch = pipeline.startswith(tuple(torch_pipes))
            s = rng.choice(torch if use_torch and torch else plain)
        text = s.text if rng.random() < 0.25 else mutate(s.text, rng, vocab, 1)
        yield Case(i, s.origin, text, pipeline, use_torch)


class MutationStrategy(Strategy):
    """Mutated lit-test inputs: parse-and-verify cases, then pipeline cases (4 to 1)."""

    name = "mutation"
    weight = 3

    def cases(self, rng: random.Random, count: int, env: Environment) -> Iterator[Case]:
        """Mutation cases; ``count`` splits 80/20 into inputs and pipeline runs."""
        inputs = round(count * 0.8)
        return self.split(env, inputs, count - inputs)

    @staticmethod
    def split(env: Environment, inputs: int, pipeline_runs: int) -> Iterator[Case]:
        """``inputs`` parse-and-verify and ``pipeline_runs`` pipeline cases, seeded by the
        campaign seed itself (the cases :func:`make_cases` always made)."""
        return make_cases(env.seeds, inputs, pipeline_runs, env.seed)
