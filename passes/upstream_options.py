"""The options of upstream MLIR passes that a pipeline may set, with the values each accepts.

MLIR checks an option's syntax (``O=x`` is not a number) but not its range: some values reach
an assertion and abort the process (``nvvm-attach-target{O=99}``, ``{chip=}``, ``{triple=}``;
``gpu-module-to-binary{format=}``). :func:`option_problem` checks one upstream element's
options against :data:`UPSTREAM_OPTIONS` before MLIR sees them. The table lists the upstream
passes Hector's pipelines use with options, and the ones users commonly add; an option of a
pass not listed is refused (a pass given without options is always accepted), so no unchecked
value reaches MLIR.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["UPSTREAM_OPTIONS", "UpstreamOption", "option_problem"]

_BOOLS = ("true", "false", "1", "0", "True", "False", "TRUE", "FALSE")


@dataclass(frozen=True)
class UpstreamOption:
    """What one upstream pass option accepts.

    ``kind`` is ``"bool"``, ``"int"`` (from ``lo`` to ``hi``, or one of ``choices``),
    ``"choice"`` (one of ``choices``) or ``"string"`` (matching ``pattern`` when it is set).
    """

    kind: str
    lo: int | None = None
    hi: int | None = None
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    describe: str = ""

    def problem(self, value: str) -> str | None:
        """Why ``value`` is not accepted, or ``None`` when it is."""
        if self.kind == "bool":
            return None if value in _BOOLS else "must be true or false"
        if self.kind == "int":
            if value in self.choices:  # values outside the range that mean something
                return None
            bounds = f"from {self.lo} to {self.hi}" if self.hi is not None else f">= {self.lo}"
            bounds = "".join(f"{c} or " for c in self.choices) + f"an integer {bounds}"
            if re.fullmatch(r"[+-]?[0-9]+", value) is None:
                return f"must be {bounds}"
            number = int(value)
            if (self.lo is not None and number < self.lo) or (
                self.hi is not None and number > self.hi
            ):
                return f"must be {bounds}"
            return None
        if self.kind == "choice":
            return None if value in self.choices else f"must be one of {', '.join(self.choices)}"
        if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
            return f"must be {self.describe}"
        return None


def _bool() -> UpstreamOption:
    return UpstreamOption("bool")


def _int(lo: int, hi: int | None = None, *special: str) -> UpstreamOption:
    return UpstreamOption("int", lo, hi, choices=special)


def _choice(*choices: str) -> UpstreamOption:
    return UpstreamOption("choice", choices=choices)


def _string(pattern: str | None = None, describe: str = "") -> UpstreamOption:
    return UpstreamOption("string", pattern=pattern, describe=describe)


# The index type's width: 0 takes the machine word; other widths are what targets use.
_INDEX_BITWIDTH = _choice("0", "16", "32", "64")
_ANY = _string()

#: Upstream passes and the options a pipeline may set on them.
UPSTREAM_OPTIONS: Mapping[str, Mapping[str, UpstreamOption]] = {
    "nvvm-attach-target": {
        # NVVMTargetAttr's verifier asserts on O outside 0..3 and on an empty chip or triple.
        "O": _int(0, 3),
        "chip": _string(r"sm_[0-9]+[a-z]?", "an NVIDIA SM name such as sm_90"),
        "triple": _string(r"nvptx(64)?-[\w.-]+", "an NVPTX triple such as nvptx64-nvidia-cuda"),
        "features": _ANY,
        "fast": _bool(),
        "ftz": _bool(),
        "l": _ANY,
        "module": _ANY,
        "ptxas-cmd-options": _ANY,
    },
    "gpu-module-to-binary": {
        # An unknown (or empty) format dereferences an empty std::optional.
        "format": _choice(
            "offloading", "llvm", "assembly", "isa", "binary", "bin", "fatbinary", "fatbin"
        ),
        "l": _ANY,
        "opts": _ANY,
        "section": _ANY,
        "toolkit": _ANY,
    },
    "convert-arith-to-llvm": {"index-bitwidth": _INDEX_BITWIDTH},
    "convert-cf-to-llvm": {"index-bitwidth": _INDEX_BITWIDTH},
    "convert-index-to-llvm": {"index-bitwidth": _INDEX_BITWIDTH},
    "convert-ub-to-llvm": {"index-bitwidth": _INDEX_BITWIDTH},
    "convert-func-to-llvm": {
        "index-bitwidth": _INDEX_BITWIDTH,
        "use-bare-ptr-memref-call-conv": _bool(),
    },
    "finalize-memref-to-llvm": {
        "index-bitwidth": _INDEX_BITWIDTH,
        "use-aligned-alloc": _bool(),
        "use-generic-functions": _bool(),
    },
    "convert-gpu-to-nvvm": {
        "index-bitwidth": _INDEX_BITWIDTH,
        "has-redux": _bool(),
        "use-bare-ptr-memref-call-conv": _bool(),
        "allowed-dialects": _ANY,
    },
    "gpu-to-llvm": {
        "use-bare-pointers-for-host": _bool(),
        "use-bare-pointers-for-kernels": _bool(),
        "intersperse-sizes-for-kernels": _bool(),
    },
    "convert-math-to-llvm": {"approximate-log1p": _bool()},
    "convert-vector-to-scf": {
        "full-unroll": _bool(),
        "lower-scalable": _bool(),
        "lower-tensors": _bool(),
        "target-rank": _int(0, 64),
    },
    "convert-vector-to-llvm": {
        "enable-amx": _bool(),
        "enable-arm-bf16": _bool(),
        "enable-arm-i8mm": _bool(),
        "enable-arm-neon": _bool(),
        "enable-arm-sve": _bool(),
        "enable-x86vector": _bool(),
        "force-32bit-vector-indices": _bool(),
        "reassociate-fp-reductions": _bool(),
        "use-vector-alignment": _bool(),
        "vector-contract-lowering": _choice("dot", "llvmintr", "outerproduct", "parallelarith"),
        "vector-transpose-lowering": _choice("eltwise", "llvmintr", "shuffle1d", "shuffle16x16"),
    },
    "async-parallel-for": {
        "async-dispatch": _bool(),
        "memref-noalias": _bool(),
        "min-task-size": _int(1),
        # -1: ask the runtime; 0 would divide by zero in the generated code.
        "num-workers": _int(1, None, "-1"),
    },
    "canonicalize": {
        "top-down": _bool(),
        "region-simplify": _choice("disabled", "normal", "aggressive"),
        "max-iterations": _int(-1),
        "max-num-rewrites": _int(-1),
        "test-convergence": _bool(),
    },
    "buffer-results-to-out-params": {
        "add-result-attr": _bool(),
        "hoist-dynamic-allocs": _bool(),
        "hoist-static-allocs": _bool(),
        "modify-public-functions": _bool(),
    },
}


def option_problem(name: str, options: Mapping[str, str]) -> str | None:
    """Why the options ``options`` of the upstream pass ``name`` are refused, or ``None``."""
    if not options:
        return None
    known = UPSTREAM_OPTIONS.get(name)
    if known is None:
        return (
            f"options of upstream pass '{name}' are not accepted: Hector checks option values "
            "before MLIR sees them and knows the options of "
            + ", ".join(sorted(UPSTREAM_OPTIONS))
            + " (run the pass without options)"
        )
    for key, value in options.items():
        option = known.get(key)
        if option is None:
            return (
                f"upstream pass '{name}' has no option '{key}' that Hector accepts "
                f"(options: {', '.join(sorted(known))})"
            )
        why = option.problem(value)
        if why is not None:
            return f"upstream pass '{name}': option '{key}' {why}, got '{value}'"
    return None
