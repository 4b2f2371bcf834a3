"""The host CPU's instruction-set features that change the CPU code Hector generates.

Two do today. The vector registers' width (:func:`vector_bits`: 512 with AVX-512, 32 of
them; 256 with AVX2, 16 of them) bounds the GEMM micro-kernel's register block
(``hector-schedule{vector_bits=...}``, ``lowering/schedule.py``): a block sized for AVX-512's
32 registers spills on AVX2's 16. AVX512-BF16 (``vdpbf16ps``, bf16 pairs multiplied and added
into f32) lets the scheduled GEMMs multiply bf16 operands in pairs (``lowering/cpu/bf16.py``).
``hector.compile`` asks :func:`vector_bits` and :func:`bf16_dot` once per compilation
(``Options``) and passes the answers to ``hector-schedule``; being compile options, both are
part of the compilation cache's key (a kernel built for one CPU's features is never loaded for
a CPU with others).

``HECTOR_BF16_DOT=off`` keeps the f32 products on a CPU that has the feature (to compare the
two paths on one machine); ``auto``, the default, uses the feature where the CPU has it;
``emulate`` compiles the bf16 products on any CPU, each ``vdpbf16ps`` rewritten into f32 vector
arithmetic with the same results (``hector-emulate-bf16-dot``, for tests on CPUs without it).
"""

from __future__ import annotations

import functools
import os

#: The environment variable choosing the bf16 products: ``auto`` (default), ``off`` or
#: ``emulate``.
ENV = "HECTOR_BF16_DOT"
#: Its values.
MODES = ("auto", "off", "emulate")
#: The ``flags`` entry of ``/proc/cpuinfo`` naming AVX512-BF16.
FLAG = "avx512_bf16"


def flags_of(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor listed in ``cpuinfo`` (``/proc/cpuinfo``)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


@functools.cache
def host_flags() -> frozenset[str]:
    """The host CPU's feature flags (empty where ``/proc/cpuinfo`` cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return flags_of(f.read())
    except OSError:
        return frozenset()


def vector_bits(flags: frozenset[str] | None = None) -> int:
    """The width of the CPU's (``flags``; the host's by default) vector registers the
    generated code uses: 512 with AVX-512 (``avx512f``), 256 with AVX2, else 128."""
    found = host_flags() if flags is None else flags
    if "avx512f" in found:
        return 512
    return 256 if "avx2" in found else 128


def has_avx512_bf16(flags: frozenset[str] | None = None) -> bool:
    """Whether the CPU (``flags``; the host's by default) has AVX512-BF16."""
    return FLAG in (host_flags() if flags is None else flags)


def _mode(environ: dict[str, str] | None) -> str:
    """:data:`ENV`'s value (``auto`` when unset or blank); ``ValueError`` naming the variable
    for a value other than :data:`MODES`."""
    env = os.environ if environ is None else environ
    mode = env.get(ENV, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{ENV} must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def bf16_dot(flags: frozenset[str] | None = None, environ: dict[str, str] | None = None) -> bool:
    """Whether compiled GEMMs with bf16 operands multiply bf16 pairs: the CPU has
    AVX512-BF16 and :data:`ENV` does not say ``off``, or :data:`ENV` says ``emulate``. A value
    other than :data:`MODES` is a ``ValueError`` naming the variable."""
    mode = _mode(environ)
    return mode == "emulate" or (mode == "auto" and has_avx512_bf16(flags))


def bf16_emulated(environ: dict[str, str] | None = None) -> bool:
    """Whether the bf16 pair products are emulated (:data:`ENV` says ``emulate``): their
    ``vdpbf16ps`` rewritten into f32 vector arithmetic (``hector-emulate-bf16-dot``)."""
    return _mode(environ) == "emulate"
