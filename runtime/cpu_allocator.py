"""Thin ctypes binding of Hector's caching CPU allocator for PyTorch
(``runtime/src/cpu_caching_allocator.cpp``).

The allocator replaces PyTorch's CPU allocator for blocks of ``min_block`` bytes or more: it maps
them itself and keeps freed ones, up to ``cache_limit`` bytes, for the next request of about the
same size, unmapping the rest at once; a request no cached block fits resizes one (``mremap``)
rather than mapping more (docs/offload.md, "Caching CPU allocator"). Training
allocates the same sizes every step, so memory an offloaded activation frees is reused by the
next block's activations without the page faults glibc's heap costs once its free memory has
been handed back. Unlike the rest of the runtime it compiles against the installed PyTorch's
``c10`` headers, at first use (``torch.utils.cpp_extension``, seconds; cached per PyTorch
version under ``$HECTOR_CACHE_DIR`` or ``~/.cache/hector``), and is then bound through its C ABI.
"""

from __future__ import annotations

import ctypes
import functools
import os

__all__ = ["CpuAllocatorError", "empty_cache", "install", "installed", "source_path", "stats"]

#: Blocks smaller than this stay with PyTorch's own allocator (glibc's heap). 64 KiB: on the
#: small GPT most activations are 0.5 MiB, and glibc's heap kept them resident after an
#: offload freed them (peak RSS 30 MiB above baseline, against 15 from this allocator).
DEFAULT_MIN_BLOCK = 64 << 10
#: Freed bytes kept for reuse; what a free would add beyond it is unmapped at once.
DEFAULT_CACHE_LIMIT = 256 << 20
_STAT_NAMES = (
    "cached_bytes",
    "mapped_bytes",
    "hits",
    "misses",
    "unmapped_on_free",
    "live_blocks",
    "resized",
    "passed_on",
)


class CpuAllocatorError(RuntimeError):
    """The caching CPU allocator could not be built, loaded or configured."""


def source_path() -> str:
    """The allocator's C++ source, next to this module."""
    return os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "src", "cpu_caching_allocator.cpp"
    )


def _build_dir() -> str:
    """The allocator's build folder: a private per-user cache directory (``$HECTOR_CACHE_DIR``
    or ``~/.cache/hector``), checked before use, since the library built there is loaded into
    the process (a folder others can write would let them plant it)."""
    import torch

    from .private_dir import user_cache_dir

    return str(user_cache_dir(f"cpu-allocator-torch-{torch.__version__}"))


@functools.cache
def _library() -> ctypes.CDLL:
    """Build (once per PyTorch version) and load the allocator's library."""
    import torch.utils.cpp_extension as cpp

    name = "hector_cpu_caching_allocator"
    build = "the cache directory"
    try:
        build = _build_dir()
        cpp.load(
            name=name,
            sources=[source_path()],
            extra_cflags=["-O2", "-std=c++17"],
            build_directory=build,
            is_python_module=False,
            verbose=False,
        )
    except (RuntimeError, OSError, ImportError) as err:
        raise CpuAllocatorError(
            f"could not build Hector's caching CPU allocator ({source_path()}) in {build}: "
            f"{str(err).strip().splitlines()[-1] if str(err).strip() else err!r} (it needs a "
            "C++17 compiler and ninja)"
        ) from None
    lib = ctypes.CDLL(os.path.join(build, f"{name}.so"))
    lib.hector_calloc_install.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    lib.hector_calloc_install.restype = ctypes.c_int
    lib.hector_calloc_installed.argtypes = []
    lib.hector_calloc_installed.restype = ctypes.c_int
    lib.hector_calloc_empty_cache.argtypes = []
    lib.hector_calloc_empty_cache.restype = ctypes.c_uint64
    lib.hector_calloc_stats.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    lib.hector_calloc_stats.restype = None
    return lib


def install(cache_limit: int = DEFAULT_CACHE_LIMIT, min_block: int = DEFAULT_MIN_BLOCK) -> None:
    """Make the caching allocator PyTorch's CPU allocator for blocks of ``min_block`` bytes or
    more, keeping at most ``cache_limit`` bytes of freed blocks (again: new limits only).

    Tensors allocated before keep their own allocator; results do not change, only where the
    memory comes from.

    Raises:
        CpuAllocatorError: the allocator cannot be built here, or a limit is out of range
            (``cache_limit`` below 0, ``min_block`` below one 4 KiB page).
    """
    if isinstance(cache_limit, bool) or not isinstance(cache_limit, int) or cache_limit < 0:
        raise CpuAllocatorError(f"cache_limit must be an int >= 0 (bytes), got {cache_limit!r}")
    if isinstance(min_block, bool) or not isinstance(min_block, int) or min_block < 4096:
        raise CpuAllocatorError(f"min_block must be an int >= 4096 (bytes), got {min_block!r}")
    if _library().hector_calloc_install(cache_limit, min_block) != 0:
        raise CpuAllocatorError(f"the allocator refused min_block={min_block}")


def installed() -> bool:
    """Whether the caching allocator serves this process's CPU blocks (never builds it)."""
    return _library.cache_info().currsize > 0 and bool(_library().hector_calloc_installed())


def empty_cache() -> int:
    """Unmap every cached free block; the bytes handed back (0 when not installed)."""
    return int(_library().hector_calloc_empty_cache()) if installed() else 0


def stats() -> dict[str, int]:
    """The allocator's counters: cached and mapped bytes, cache hits, misses (new mappings),
    blocks unmapped on free (over the limit), live blocks, cached blocks resized for a
    request of another size, and requests passed on to the allocator it replaced when no
    mapping could be made; empty when not installed."""
    if not installed():
        return {}
    out = (ctypes.c_uint64 * len(_STAT_NAMES))()
    _library().hector_calloc_stats(out)
    return dict(zip(_STAT_NAMES, (int(v) for v in out), strict=True))
