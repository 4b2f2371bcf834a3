"""CPU entries kept in the persistent compilation cache (:mod:`hector.runtime.compile_cache`).

A compiled CPU program is stored as the shared library its JIT code links into, with its ABI and
the IR of each stage; a later process with the same program, options and toolchain loads it
instead of running the stages and LLVM (:data:`STATS` counts hits, misses and stores).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..dialects import Kind
from ..lowering.cpu.jit import CpuKernel, LibraryKernel
from ..runtime import compile_cache
from .base import FunctionAbi, StagedModule
from .options import Options

if TYPE_CHECKING:
    from ..program import Traced

#: Lookups that found an entry, lookups that did not, entries written (this process).
STATS = {"hits": 0, "misses": 0, "stores": 0}
LIBRARY, STAGES = "kernel.so", "stages.json.gz"
#: Suffix of a stage's file in an entry when its IR is kept as MLIR bytecode (the last stage).
BYTECODE = ".mlirbc"


class Program(NamedTuple):
    """What a CPU entry is made of besides its traced program."""

    staged: StagedModule
    kernel: CpuKernel | LibraryKernel
    offloads: bool
    trims_idle: bool


@functools.cache
def _toolchain() -> str:
    import hector
    from hector import dialects, lowering, passes, runtime

    pkgs = (hector, dialects, lowering, passes, runtime)
    # Only the folders that hold a package's own modules: an editable install's path also names
    # the checkout's root (its tests, benchmarks and environment are not the compiler).
    dirs = [
        d for pkg in pkgs for d in pkg.__path__ if os.path.isfile(os.path.join(d, "__init__.py"))
    ]
    return compile_cache.toolchain(dirs)


def key(traced: Traced, autodiff: bool, options: Options | None) -> str:
    """What the compiled code depends on, hashed: the program (locations included), its ABI,
    the options (graph statistics included) and the toolchain."""
    abi = (traced.name, traced.arg_kinds, traced.result_kinds, traced.result_widths)
    slices = sorted(traced.weight_slices.items())
    opts = repr(options if options is not None else Options())
    return compile_cache.key_of(traced.key, abi, slices, autodiff, opts, _toolchain())


def _abi_of(d: dict[str, Any]) -> FunctionAbi:
    shapes = tuple(tuple(None if x is None else int(x) for x in s) for s in d["result_shapes"])
    kinds = tuple(Kind(k) for k in d["result_kinds"])
    return FunctionAbi(
        str(d["name"]),
        kinds,
        shapes,
        tuple(map(int, d["grad_of"])),
        int(d["num_saved"]),
        tuple(map(str, d.get("result_storage", ()))),
    )


def load(cache: compile_cache.CompileCache, k: str) -> Program | None:
    """The program stored under ``k``, or None (counted as a miss)."""
    try:
        entry_dir, meta = cache.load(k) or (None, {})
        if entry_dir is None:
            raise LookupError
        abi = {name: _abi_of(a) for name, a in meta["abi"].items()}
        texts = json.loads(gzip.decompress(compile_cache.read(entry_dir, STAGES)))
        stages = {
            n: t if t is not None else _bytecode(entry_dir, meta, n) for n, t in texts.items()
        }
        staged = StagedModule(None, None, stages, float(meta["seconds"]), abi)
        flags = bool(meta["offloads"]), bool(meta["trims_idle"])
        program = Program(staged, LibraryKernel(str(entry_dir / LIBRARY)), *flags)
    except (
        LookupError,
        TypeError,
        ValueError,
        AttributeError,
        OSError,
        EOFError,
        RecursionError,
    ):
        STATS["misses"] += 1
        return None
    STATS["hits"] += 1
    return program


def _bytecode(entry_dir: Path, meta: dict[str, Any], stage: str) -> bytes:
    """A stage's bytecode file, one that ``meta`` lists (its checksum was checked)."""
    if stage + BYTECODE not in meta["files"]:
        raise KeyError(stage)
    return compile_cache.read(entry_dir, stage + BYTECODE)


def store(cache: compile_cache.CompileCache, k: str, program: Program, library: str) -> None:
    """Write ``program``, whose compiled code is the shared library ``library``, under ``k``."""
    try:
        _store(cache, k, program, library)
    except OSError as err:  # the temporary folder: a full or read-only file system
        compile_cache.warn_once("storing a compiled program", err)


def _store(cache: compile_cache.CompileCache, k: str, program: Program, library: str) -> None:
    staged = program.staged
    abi = {name: dataclasses.asdict(a) for name, a in staged.abi.items()}
    meta = {"abi": abi, "seconds": staged.seconds, "offloads": program.offloads}
    meta["trims_idle"] = program.trims_idle
    with tempfile.TemporaryDirectory(prefix="hector-entry-") as tmp:
        files = {LIBRARY: library, STAGES: os.path.join(tmp, STAGES)}
        for name, ir in staged.stages.items():  # stages kept as bytecode (null in the JSON)
            if isinstance(ir, bytes):
                files[name + BYTECODE] = os.path.join(tmp, name + BYTECODE)
                Path(files[name + BYTECODE]).write_bytes(ir)
        texts = {n: t if isinstance(t, str) else None for n, t in staged.stages.items()}
        Path(files[STAGES]).write_bytes(gzip.compress(json.dumps(texts).encode(), compresslevel=1))
        if cache.store(k, files, meta):
            STATS["stores"] += 1
