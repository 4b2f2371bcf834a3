"""CUDA entries kept in the persistent compilation cache (:mod:`hector.runtime.compile_cache`).

A program compiled for target ``cuda`` is stored as its host module — the ``host`` stage: the
LLVM dialect calling MLIR's CUDA runtime wrappers, the PTX of its chip embedded in a
``gpu.binary`` — as MLIR bytecode, with its PTX (``kernels.ptx``) and what every target's entry
holds (:mod:`hector.targets.program_cache`: the IR of each stage, the ABI). A later process
with the same program, options, chip and toolchain parses that module instead of running the
stages (Hector's, then LLVM's NVPTX back end) and hands it to the JIT as a freshly compiled one
would be (:data:`STATS` counts hits, misses and stores). The JIT's machine code for the host is
not kept: the JIT binds the runtime wrappers in the process that runs them (MLIR's library on
a GPU, PyTorch's stream and allocator hooks, or the emulated driver in tests).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import TYPE_CHECKING, NamedTuple

from mlir import ir

from ..dialects import make_context
from ..lowering import pipelines
from ..runtime import compile_cache
from .base import StagedModule
from .options import Options
from .program_cache import Found, ProgramCache

if TYPE_CHECKING:
    from ..program import Traced

__all__ = ["CACHE", "HOST", "PTX", "STATS", "Program", "key", "load", "store"]

#: The CUDA target's view of the compilation cache.
CACHE = ProgramCache("cuda")
#: Lookups that found an entry, lookups that did not, entries written (this process).
STATS = CACHE.stats
#: The stage whose module the JIT compiles (kept as bytecode), and the entry's PTX file.
HOST, PTX = "host", "kernels.ptx"


class Program(NamedTuple):
    """A CUDA entry: the stages with the host module parsed (``staged.module``, in a context of
    its own) and the PTX of every kernel."""

    staged: StagedModule
    ptx: str


def key(traced: Traced, autodiff: bool, options: Options | None, chip: str) -> str:
    """The cache key of ``traced`` compiled for ``chip`` (:meth:`ProgramCache.key`, with the
    chip and every stage's pipeline: the PTX version and NVVM features are in them)."""
    params = pipelines.LoweringParams(chip=chip)
    stages = tuple((s.name, s.pipeline_for(params)) for s in pipelines.TARGET_STAGES["cuda"])
    return CACHE.key(traced, autodiff, options, chip, stages)


def _program(found: Found) -> Program:
    """The entry's host module parsed in a fresh context, with its PTX."""
    host = found.staged.stages.get(HOST)
    if not isinstance(host, bytes):
        raise compile_cache.CorruptEntryError(f"the {HOST} stage is not bytecode")
    ptx = compile_cache.read(found.entry_dir, PTX).decode()
    context = make_context()
    with context:
        try:
            module = ir.Module.parse(host)
        except ir.MLIRError as err:
            raise compile_cache.CorruptEntryError(f"the {HOST} module: {err}") from None
    return Program(dataclasses.replace(found.staged, context=context, module=module), ptx)


def load(cache: compile_cache.CompileCache, k: str) -> Program | None:
    """The program stored under ``k``, or None (counted as a miss)."""
    return CACHE.load(cache, k, _program)


def store(cache: compile_cache.CompileCache, k: str, program: Program, chip: str) -> None:
    """Write ``program`` (its ``host`` stage as bytecode), compiled for ``chip``, under ``k``."""
    if not isinstance(program.staged.stages.get(HOST), bytes):
        raise ValueError(f"the {HOST} stage must be kept as bytecode to be cached")
    try:
        with tempfile.TemporaryDirectory(prefix="hector-ptx-") as tmp:
            path = os.path.join(tmp, PTX)
            with open(path, "w", encoding="utf-8") as f:
                f.write(program.ptx)
            CACHE.store(cache, k, program.staged, {PTX: path}, {"chip": chip})
    except OSError as err:  # the temporary folder: a full or read-only file system
        compile_cache.warn_once("storing a compiled program", err)
