"""The ``pass-options`` strategy: pipelines that mix Hector passes with upstream MLIR passes,
each given random options (out of range, negative, huge, of the wrong type, unknown names),
sometimes anchored on ``func.func`` or ``gpu.module`` and sometimes nested
``builtin.module(...)`` hundreds or thousands deep.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from hector_fuzz.base import Environment, Strategy
from hector_fuzz.cases import Case
from hector_fuzz.grammar import SpecModule

__all__ = [
    "PassOptionsStrategy",
    "UPSTREAM_PASSES",
    "option_value",
    "random_pipeline",
    "upstream_pass",
]

#: Upstream passes, where they anchor ("" for the module), and their options' kinds.
UPSTREAM_PASSES: dict[str, tuple[str, dict[str, str]]] = {
    "canonicalize": ("", {"max-iterations": "int", "max-num-rewrites": "int",
                          "region-simplify": "enum", "top-down": "bool",
                          "test-convergence": "bool"}),
    "cse": ("", {}),
    "inline": ("", {"max-iterations": "int", "default-pipeline": "pipeline"}),
    "sccp": ("", {}),
    "symbol-dce": ("", {}),
    "loop-invariant-code-motion": ("", {}),
    "nvvm-attach-target": ("", {"O": "int", "chip": "str", "features": "str", "triple": "str",
                                "fast": "bool", "ftz": "bool", "module": "str", "l": "list"}),
    "rocdl-attach-target": ("", {"O": "int", "chip": "str", "abi": "str", "wave64": "bool"}),
    "gpu-module-to-binary": ("", {"format": "enum", "toolkit": "str", "opts": "str",
                                  "l": "list"}),
    "async-parallel-for": ("", {"async-dispatch": "bool", "num-workers": "int",
                                "min-task-size": "int"}),
    "finalize-memref-to-llvm": ("", {"index-bitwidth": "int", "use-generic-functions": "bool",
                                     "use-aligned-alloc": "bool"}),
    "convert-vector-to-scf": ("", {"full-unroll": "bool", "target-rank": "int",
                                   "lower-tensors": "bool"}),
    "convert-func-to-llvm": ("", {"index-bitwidth": "int",
                                  "use-bare-ptr-memref-call-conv": "bool"}),
    "convert-arith-to-llvm": ("", {"index-bitwidth": "int"}),
    "convert-index-to-llvm": ("", {"index-bitwidth": "int"}),
    "convert-scf-to-cf": ("", {}),
    "lower-affine": ("", {}),
    "expand-strided-metadata": ("", {}),
    "convert-linalg-to-loops": ("", {}),
    "one-shot-bufferize": ("", {"bufferize-function-boundaries": "bool",
                                "buffer-alignment": "int", "analysis-heuristic": "enum"}),
    "remove-dead-values": ("", {}),
    "topological-sort": ("", {}),
    "control-flow-sink": ("", {}),
    "strip-debuginfo": ("", {}),
    "affine-loop-tile": ("func.func", {"tile-size": "int", "cache-size": "int",
                                       "separate": "bool", "tile-sizes": "list"}),
    "affine-loop-unroll": ("func.func", {"unroll-factor": "int", "unroll-full": "bool",
                                         "unroll-num-reps": "int",
                                         "unroll-full-threshold": "int"}),
    "affine-super-vectorize": ("func.func", {"virtual-vector-size": "list",
                                             "vectorize-reductions": "bool"}),
    "convert-gpu-to-nvvm": ("gpu.module", {"index-bitwidth": "int", "chipset": "str",
                                           "use-bare-ptr-memref-call-conv": "bool"}),
}  # fmt: skip

_INT_VALUES = ["0", "-1", "1", "3", "4", "99", "1000", "2147483647", "2147483648", "-2147483649",
               "4294967296", "9223372036854775807", "9223372036854775808",
               "99999999999999999999", "1.5", "x", "", "true", "0x10", "1,2"]  # fmt: skip
_ANY_VALUES = ["", "bogus", "x y", "'q'", "\"s\"", "{}", "{a=1}", "[", "(", ",", "=", "sm_999",
               "sm_90", "+ptx80", "+ptx9999", "isa", "bin", "fatbin", "1,2,3", "-1,-2",
               "0,0", "nvptx64-nvidia-cuda", "canonicalize", "none", "0", "aggressive",
               "fuzzer", "offload", "assembly", "disabled"]  # fmt: skip
_FLOAT_VALUES = ["nan", "inf", "-inf", "1e309", "-0.0", "0.5", "-1", "1e-320", "2"]


def option_value(kind: str, rng: random.Random) -> str:
    """A value for an option of ``kind``: mostly odd, sometimes plausible."""
    if kind == "int" or rng.random() < 0.2:
        return rng.choice(_INT_VALUES if rng.random() < 0.8 else _ANY_VALUES)
    if kind == "bool":
        return rng.choice(["true", "false", "1", "maybe", "2", ""])
    if kind == "float":
        return rng.choice(_FLOAT_VALUES)
    return rng.choice(_ANY_VALUES)


def _hector_pass(rng: random.Random) -> str:
    from hector.passes.registry import MLIR_CONTEXT, PASSES
    from hector.tools.opt import _load_passes

    _load_passes()
    names = sorted(n for n, p in PASSES.items() if p.context == MLIR_CONTEXT)
    name = rng.choice(names)
    options = list(PASSES[name].options.items())
    chosen = rng.sample(options, rng.randint(0, min(2, len(options)))) if options else []
    values = [f"{k}={option_value(o.type.__name__, rng)}" for k, o in chosen]
    if rng.random() < 0.1:
        values.append(f"bogus-{rng.randint(0, 9)}=1")
    return f"{name}{{{' '.join(values)}}}" if values else name


def upstream_pass(rng: random.Random) -> str:
    """An upstream pass with random options, wrapped in its anchor op when it needs one."""
    name = rng.choice(sorted(UPSTREAM_PASSES))
    anchor, options = UPSTREAM_PASSES[name]
    keys = list(options) + (["unknown-option"] if rng.random() < 0.1 else [])
    chosen = rng.sample(keys, rng.randint(0, min(3, len(keys))))
    values = [f"{k}={option_value(options.get(k, 'str'), rng)}" for k in chosen]
    text = f"{name}{{{' '.join(values)}}}" if values else name
    return f"{anchor}({text})" if anchor and rng.random() < 0.9 else text


def random_pipeline(rng: random.Random) -> str:
    """1-4 passes, Hector's and upstream, some nested ``builtin.module(...)`` deep."""
    parts = [
        upstream_pass(rng) if rng.random() < 0.6 else _hector_pass(rng)
        for _ in range(rng.randint(1, 4))
    ]
    pipeline = ", ".join(parts)
    if rng.random() < 0.15:
        depth = rng.choice([2, 10, 100, 1000, 3000])
        anchor = rng.choice(["builtin.module(", "func.func(", "gpu.module(", "builtin.module("])
        pipeline = anchor * depth + pipeline + ")" * depth
    elif rng.random() < 0.3:
        pipeline = f"builtin.module({pipeline})"
    return pipeline


class PassOptionsStrategy(Strategy):
    """Valid inputs (a lit test's or a generated module) through random mixed pipelines."""

    name = "pass-options"
    weight = 2

    def cases(self, rng: random.Random, count: int, env: Environment) -> Iterator[Case]:
        """Cases whose pipelines come from :func:`random_pipeline`."""
        plain = env.valid_plain
        for _ in range(count):
            if plain and rng.random() < 0.6:
                seed = rng.choice(plain)
                origin, text = seed.origin, seed.text
            else:
                dialect = rng.choice(["hector_inter", "hector_intra"])
                origin = f"grammar:{dialect}"
                text = SpecModule(rng, dialect, ill=0.0).render(rng.randint(1, 5))
            yield Case(0, origin, text, random_pipeline(rng))
