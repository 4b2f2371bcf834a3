"""CPU entries kept in the persistent compilation cache (:mod:`hector.runtime.compile_cache`).

A compiled CPU program is stored as the shared library its JIT code links into, beside what
every target's entry holds (:mod:`hector.targets.program_cache`: the IR of each stage, the
ABI); a later process with the same program, options and toolchain loads it instead of running
the stages and LLVM (:data:`STATS` counts hits, misses and stores).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ..lowering.cpu.jit import CpuKernel, LibraryKernel
from ..runtime import compile_cache
from .base import StagedModule
from .options import Options
from .program_cache import Found, ProgramCache

if TYPE_CHECKING:
    from ..program import Traced

__all__ = ["CACHE", "LIBRARY", "STATS", "Program", "key", "load", "store"]

#: The CPU target's view of the compilation cache.
CACHE = ProgramCache("cpu")
#: Lookups that found an entry, lookups that did not, entries written (this process).
STATS = CACHE.stats
LIBRARY = "kernel.so"


class Program(NamedTuple):
    """What a CPU entry is made of besides its traced program."""

    staged: StagedModule
    kernel: CpuKernel | LibraryKernel
    offloads: bool
    trims_idle: bool


def key(traced: Traced, autodiff: bool, options: Options | None) -> str:
    """The cache key of ``traced`` compiled for the CPU (:meth:`ProgramCache.key`)."""
    return CACHE.key(traced, autodiff, options)


def _program(found: Found) -> Program:
    """The entry's library loaded, with the flags stored beside it."""
    flags = bool(found.meta["offloads"]), bool(found.meta["trims_idle"])
    return Program(found.staged, LibraryKernel(str(found.entry_dir / LIBRARY)), *flags)


def load(cache: compile_cache.CompileCache, k: str) -> Program | None:
    """The program stored under ``k``, or None (counted as a miss)."""
    return CACHE.load(cache, k, _program)


def store(cache: compile_cache.CompileCache, k: str, program: Program, library: str) -> None:
    """Write ``program``, whose compiled code is the shared library ``library``, under ``k``."""
    meta = {"offloads": program.offloads, "trims_idle": program.trims_idle}
    CACHE.store(cache, k, program.staged, {LIBRARY: library}, meta)
