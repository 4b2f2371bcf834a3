"""Compiled programs of every target in the persistent compilation cache
(:mod:`hector.runtime.compile_cache`): one entry format and one key for all of them.

An entry holds what any target's program is made of — the IR after each stage
(``stages.json.gz``; a stage kept as MLIR bytecode in a file of its own), each function's ABI
and the compile time — beside the files and metadata its target adds (the CPU target's shared
library, the CUDA target's PTX). :class:`ProgramCache` is one target's view of the store: its
keys hash the target's name and parameters with what every key hashes, its :attr:`stats`
count this process's hits, misses and stores, and a target turns what :meth:`load` finds into
its own program with a function of its own (loading a library, JIT-compiling host code).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..dialects import Kind
from ..runtime import compile_cache
from .base import FunctionAbi, StagedModule
from .options import Options

if TYPE_CHECKING:
    from ..program import Traced

__all__ = ["BYTECODE", "STAGES", "Found", "ProgramCache"]

STAGES = "stages.json.gz"
#: Suffix of a stage's file in an entry when its IR is kept as MLIR bytecode.
BYTECODE = ".mlirbc"
#: What reading an entry may raise when a file of it is not what the cache wrote.
_UNREADABLE = (
    LookupError,
    TypeError,
    ValueError,
    AttributeError,
    OSError,
    EOFError,
    RecursionError,
)
T = TypeVar("T")


class Found(NamedTuple):
    """An entry as :meth:`ProgramCache.load` found it, every file checked against its checksum:
    the stages and ABI (``staged``, with no module), its directory and its metadata."""

    staged: StagedModule
    entry_dir: Path
    meta: dict[str, Any]


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


def _bytecode(entry_dir: Path, meta: dict[str, Any], stage: str) -> bytes:
    """A stage's bytecode file, one that ``meta`` lists (its checksum was checked)."""
    if stage + BYTECODE not in meta["files"]:
        raise KeyError(stage)
    return compile_cache.read(entry_dir, stage + BYTECODE)


def _stage_files(staged: StagedModule, folder: str) -> dict[str, str]:
    """The IR of ``staged``'s stages written into ``folder`` as an entry keeps it: the texts in
    one gzipped JSON object, each stage kept as bytecode in a file of its own (null in the
    JSON); returns the files by their name in the entry."""
    files = {STAGES: os.path.join(folder, STAGES)}
    for name, ir in staged.stages.items():
        if isinstance(ir, bytes):
            files[name + BYTECODE] = os.path.join(folder, name + BYTECODE)
            Path(files[name + BYTECODE]).write_bytes(ir)
    texts = {n: t if isinstance(t, str) else None for n, t in staged.stages.items()}
    Path(files[STAGES]).write_bytes(gzip.compress(json.dumps(texts).encode(), compresslevel=1))
    return files


def _staged(entry_dir: Path, meta: dict[str, Any]) -> StagedModule:
    """The stages, ABI and compile time an entry holds."""
    abi = {name: _abi_of(a) for name, a in meta["abi"].items()}
    texts = json.loads(gzip.decompress(compile_cache.read(entry_dir, STAGES)))
    stages = {n: t if t is not None else _bytecode(entry_dir, meta, n) for n, t in texts.items()}
    return StagedModule(None, None, stages, float(meta["seconds"]), abi)


class ProgramCache:
    """One target's programs in the compilation cache; :attr:`stats` counts this process's
    lookups that found an entry (``hits``), those that did not (``misses``) and entries
    written (``stores``)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.stats = {"hits": 0, "misses": 0, "stores": 0}

    def key(self, traced: Traced, autodiff: bool, options: Options | None, *target: object) -> str:
        """What the compiled code depends on, hashed: the target and its parameters
        (``target``: a chip, its pipelines), the program (locations included), its ABI, the
        options (graph statistics included), Hector's version and the toolchain."""
        import hector

        abi = (traced.name, traced.arg_kinds, traced.result_kinds, traced.result_widths)
        slices = sorted(traced.weight_slices.items())
        opts = repr(options if options is not None else Options())
        return compile_cache.key_of(
            self.target,
            target,
            traced.key,
            abi,
            slices,
            autodiff,
            opts,
            hector.__version__,
            _toolchain(),
        )

    def load(
        self, cache: compile_cache.CompileCache, k: str, program: Callable[[Found], T]
    ) -> T | None:
        """``program`` of the entry stored under ``k``, or None (counted as a miss). An entry
        whose files check out but that ``program`` cannot use (it raises ``OSError``,
        ``ValueError``, ...) is removed with one warning, and compiled again by the caller."""
        try:
            loaded = cache.load(k)
        except _UNREADABLE:
            loaded = None
        if loaded is None:
            self.stats["misses"] += 1
            return None
        entry_dir, meta = loaded
        try:
            found = program(Found(_staged(entry_dir, meta), entry_dir, meta))
        except _UNREADABLE as err:
            compile_cache.warn_once("reading an entry", err, "removed it, compiling again")
            cache.discard(k)
            self.stats["misses"] += 1
            return None
        self.stats["hits"] += 1
        return found

    def store(
        self,
        cache: compile_cache.CompileCache,
        k: str,
        staged: StagedModule,
        files: Mapping[str, str],
        meta: Mapping[str, Any],
    ) -> None:
        """Write ``staged`` (its stages, ABI and compile time) with the target's ``files``
        (name in the entry → path of a file to copy) and ``meta`` under ``k``; a file system
        that refuses is no error (one warning, no entry)."""
        abi = {name: dataclasses.asdict(a) for name, a in staged.abi.items()}
        entry_meta = {**meta, "abi": abi, "seconds": staged.seconds}
        try:
            with tempfile.TemporaryDirectory(prefix="hector-entry-") as tmp:
                stored = cache.store(k, {**files, **_stage_files(staged, tmp)}, entry_meta)
        except OSError as err:  # the temporary folder: a full or read-only file system
            compile_cache.warn_once("storing a compiled program", err)
            return
        if stored:
            self.stats["stores"] += 1
