"""Hector's host memory cache, bound through ctypes (``runtime/include/hector/host_memory.h``).

Generated CPU code allocates its intermediate buffers through the cache (its ``memref.alloc``
and ``memref.dealloc`` become calls of the cache's entry points, :func:`engine_symbols`), and
compiled functions' results are arrays over cache blocks (:func:`empty`). A block freed at the
end of one training step is then handed to the next step's request of about its size instead
of going back to the kernel and faulting every page in again; a request no idle block is about
the size of splits a larger one (its tail stays idle) or grows one (``mremap``: the pages it
holds stay resident, only growth idle blocks cannot cover is new).

The cache never holds the process above the peak plain ``malloc``/``free`` would reach: it
releases idle blocks worth a block's growth before it grows one. It does keep idle blocks between
steps, up to a limit (``HECTOR_HOST_CACHE_LIMIT`` bytes, default 8 GiB; :func:`set_cache_limit`);
:func:`empty_cache` gives them all back.

This module depends only on ctypes and numpy, like the rest of the runtime binding.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import native

__all__ = [
    "empty",
    "empty_cache",
    "engine_symbols",
    "keeping_no_idle",
    "set_cache_limit",
    "stats",
]

#: Counter names of ``hector_host_stats``, in its output order.
STAT_NAMES = (
    "live_bytes",
    "idle_bytes",
    "hits",
    "misses",
    "released_bytes",
    "limit_bytes",
    "resized",
    "mapped_bytes",
)

# MLIR's generic allocation entry points (finalize-memref-to-llvm{use-generic-functions=true})
# and the cache functions that serve them.
GENERIC = {
    "_mlir_memref_to_llvm_alloc": "hector_host_alloc",
    "_mlir_memref_to_llvm_aligned_alloc": "hector_host_aligned_alloc",
    "_mlir_memref_to_llvm_free": "hector_host_free",
}


@functools.cache
def _lib() -> ctypes.CDLL:
    lib = native.load_library()
    u64, i64, i32, p = ctypes.c_uint64, ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p
    lib.hector_host_alloc.argtypes, lib.hector_host_alloc.restype = [u64], p
    lib.hector_host_aligned_alloc.argtypes = [u64, u64]
    lib.hector_host_aligned_alloc.restype = p
    lib.hector_host_free.argtypes, lib.hector_host_free.restype = [p], None
    lib.hector_host_empty_cache.argtypes, lib.hector_host_empty_cache.restype = [], None
    lib.hector_host_set_cache_limit.argtypes = [i64]
    lib.hector_host_set_cache_limit.restype = i64
    lib.hector_host_stats.argtypes, lib.hector_host_stats.restype = [p, i32], i32
    return lib


def engine_symbols() -> dict[str, ctypes.c_void_p]:
    """The addresses an ExecutionEngine binds MLIR's generic allocation functions to."""
    lib = _lib()
    return {
        generic: ctypes.cast(getattr(lib, ours), ctypes.c_void_p)
        for generic, ours in GENERIC.items()
    }


class _Block:
    """One cache block viewed as an array; freed when the last array over it goes."""

    __slots__ = ("__array_interface__", "_address", "_free")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        self._address = None
        self._free = _lib().hector_host_free
        nbytes = math.prod(shape) * dtype.itemsize
        address = _lib().hector_host_alloc(nbytes)
        if not address:
            raise MemoryError(f"the host memory cache could not allocate {nbytes} bytes")
        self._address = address
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "data": (address, False),
            "version": 3,
        }

    def __del__(self) -> None:
        if self._address is not None:
            self._free(self._address)


def empty(shape: tuple[int, ...] | list[int], dtype: Any = np.float32) -> np.ndarray:
    """An uninitialised C-contiguous array whose memory comes from the cache (given back when
    the array, and every view and tensor sharing it, is gone)."""
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in shape {dims}")
    return np.asarray(_Block(dims, np.dtype(dtype)))


def empty_cache() -> None:
    """Give every idle block back to the system."""
    _lib().hector_host_empty_cache()


@contextlib.contextmanager
def keeping_no_idle() -> Iterator[None]:
    """Within the block the cache keeps no idle block (limit 0: every free releases, as plain
    malloc/free would), so resident memory is what is live; the previous limit comes back
    after. For a call whose peak must match a model of its live buffers (a program compiled
    under a memory budget); it sets the process's limit, so calls on other threads in the
    block release too."""
    previous = stats()["limit_bytes"]
    set_cache_limit(0)
    try:
        yield
    finally:
        set_cache_limit(previous)


def set_cache_limit(limit_bytes: int | None) -> int:
    """Keep at most ``limit_bytes`` idle (``None``: the default); returns the limit in force."""
    return int(_lib().hector_host_set_cache_limit(-1 if limit_bytes is None else limit_bytes))


def stats() -> dict[str, int]:
    """The cache's counters: ``live_bytes``, ``idle_bytes``, ``hits`` (requests served by an
    idle block of about their size), ``misses`` (requests that mapped a new block), ``resized``
    (requests served by resizing an idle block of another size), ``released_bytes``,
    ``limit_bytes`` and ``mapped_bytes`` (bytes newly mapped: new blocks and growth)."""
    out = (ctypes.c_int64 * len(STAT_NAMES))()
    count = _lib().hector_host_stats(out, len(STAT_NAMES))
    return {name: int(out[i]) for i, name in enumerate(STAT_NAMES[:count])}
