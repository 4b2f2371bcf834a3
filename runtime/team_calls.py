"""Team calls: compiled CPU functions whose kernels' workers are the OpenMP threads PyTorch uses.

A scheduled kernel's workers (``lowering/cpu/workers.py``) are tasks of MLIR's async runtime,
whose thread pool is a second set of threads beside PyTorch's OpenMP threads. Between two of
PyTorch's parallel operators (a training step's loss, autograd's accumulations) those OpenMP
threads spin for a while before they sleep, so with as many threads as cores a spinning
OpenMP thread and an async worker share a core, and each kernel's join waits for the
scheduler to give the worker its turn. :func:`call` runs a compiled function on the calling
thread inside a parallel region of that OpenMP runtime (``hector_team_call``,
``runtime/src/team_calls.cpp``): the chunks the function hands to the async runtime go to a
queue the region's other threads empty, and the caller too when it reaches the join
(``mlirAsyncRuntimeAwaitAllInGroup``) with chunks still queued, so a helper the scheduler has
not run yet does not hold the join. The engine binds those two entry points to Hector's
(:func:`engine_symbols`; a linked kernel library renames them), which forward to MLIR's own
outside a team call. Which thread runs a chunk changes; the chunks and the order their
partial results are combined in do not, so the results are the same bits.

A helper spins a few tens of microseconds between chunks, then sleeps until the next one. The
region's start and end wait for all its threads, as every PyTorch parallel operator does: on a
machine whose cores other processes hold, that wait is a scheduler's turn per call.

After a team call whose helpers ran none of its chunks (the scheduler gave them no core while
it ran), the next few calls run without a region to start and end: as pool calls (below), or
solo with pool calls off (every chunk on the calling thread at its join).

Team calls are off unless ``HECTOR_TEAM_CALLS=1``: on the 2-core machine the project is
measured on, shared with other jobs, they made the RGCN route's kernels slower (the region's
start and end wait for a thread the scheduler has not run); they are meant for a machine whose
cores the process has to itself, where measured before they become the default.

**Pool calls** are the default otherwise (``HECTOR_POOL_CALLS=0`` hands the chunks to MLIR's
pool instead): the chunks go to the same queue, which Hector's own helper threads empty
(``hector_pool_begin``/``hector_pool_end``; at most ``torch.get_num_threads() - 1`` helpers,
started on first use), and the caller runs the chunks still queued at each join. Nothing waits
for a helper that has not started a chunk: not the join (the caller takes its chunk), not the
call's start or end (no region; the call's queue is freed by whichever of the caller and its
helpers leaves it last). With MLIR's pool a join waited for the pool thread to be given a core
(on a machine as busy as it has cores, a scheduler's turn per kernel). The helpers of a forked
child are its own (started again on its first call: ``pthread_atfork``), where MLIR's pool,
whose threads the child does not have, left the child's first call waiting forever.

**Spin windows** (:func:`set_spin`, :data:`SPIN_ENV`; off by default, 0 µs): after a call a
helper stays awake that long, watching for the next call, before it sleeps, and at a join the
caller, once the queue is empty, watches the chunks the helpers run end that long before it
blocks in MLIR's await. Python's ~0.2 ms between two kernel calls thus finds the helper awake,
and a chunk's end reaches the caller without a futex wake-up; a process that stops calling
sleeps after one window. Which thread runs a chunk changes, the results do not. They are off
by default: on the 2-core machine the project is measured on, a spinning helper took its core
from PyTorch's operators between a training step's kernels (the RGCN step slower with them).

This module depends only on ctypes, like the rest of the runtime binding.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from . import native
from .settings import SettingError

__all__ = [
    "ENV",
    "POOL_ENV",
    "REPLACED",
    "SPIN_ENV",
    "PoolCounts",
    "available",
    "call",
    "engine_symbols",
    "pool_counts",
    "pool_enabled",
    "queued_chunks",
    "set_fallbacks",
    "set_spin",
    "skip_regions",
]

#: Environment variable: ``1`` runs compiled functions as team calls; unset or anything else,
#: without (the chunks go to MLIR's pool).
ENV = "HECTOR_TEAM_CALLS"
#: Environment variable: ``0`` hands the chunks of calls other than team calls to MLIR's pool;
#: unset or anything else, pool calls (Hector's helpers, the caller running queued chunks).
POOL_ENV = "HECTOR_POOL_CALLS"
#: Environment variable, read when the runtime library is first bound: ``IDLE,JOIN`` (or one
#: number for both), the spin windows of :func:`set_spin` in microseconds.
SPIN_ENV = "HECTOR_POOL_SPIN_US"
#: The async runtime's entry points team calls replace (a worker's chunk handed over, a join),
#: and what the engine binds them to (a linked kernel library renames them to).
REPLACED = {
    "mlirAsyncRuntimeExecute": "hector_async_execute",
    "mlirAsyncRuntimeAwaitAllInGroup": "hector_async_await_all_in_group",
}

_BODY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@functools.cache
def _lib() -> ctypes.CDLL:
    lib = native.load_library()
    lib.hector_team_call.argtypes = [_BODY, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.hector_team_call.restype = None
    lib.hector_team_queued.argtypes = []
    lib.hector_team_queued.restype = ctypes.c_uint64
    lib.hector_team_available.argtypes = []
    lib.hector_team_available.restype = ctypes.c_int
    lib.hector_team_set_fallbacks.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.hector_team_set_fallbacks.restype = None
    lib.hector_pool_begin.argtypes = [ctypes.c_int]
    lib.hector_pool_begin.restype = ctypes.c_void_p
    lib.hector_pool_end.argtypes = [ctypes.c_void_p]
    lib.hector_pool_end.restype = None
    for name in ("hector_pool_queued", "hector_pool_helped"):
        getattr(lib, name).argtypes = []
        getattr(lib, name).restype = ctypes.c_uint64
    lib.hector_pool_helpers.argtypes = []
    lib.hector_pool_helpers.restype = ctypes.c_int
    lib.hector_team_set_solo_calls.argtypes = [ctypes.c_int]
    lib.hector_team_set_solo_calls.restype = None
    lib.hector_pool_set_spin.argtypes = [ctypes.c_int64, ctypes.c_int64]
    lib.hector_pool_set_spin.restype = None
    lib.hector_pool_naps.argtypes = []
    lib.hector_pool_naps.restype = ctypes.c_uint64
    windows = _spin_from_environment()
    if windows is not None:
        lib.hector_pool_set_spin(*windows)
    return lib


def _spin_from_environment() -> tuple[int, int] | None:
    """:data:`SPIN_ENV` as nanoseconds ``(idle, join)``; None when unset or empty."""
    text = os.environ.get(SPIN_ENV, "").strip()
    if not text:
        return None
    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) < 0:
        raise SettingError(f"{SPIN_ENV} wants IDLE,JOIN microseconds (>= 0), got {text!r}")
    idle, join = parts[0], parts[-1]
    return round(idle * 1000), round(join * 1000)


def set_spin(idle_us: float | None = None, join_us: float | None = None) -> None:
    """Set the spin windows, in microseconds (None: the default, 0): how long a pool helper
    stays awake after a call, watching for the next one before it sleeps, and how long the
    calling thread watches at a join for the chunks helpers are running before it blocks.
    0 sleeps (blocks) at once. Which thread runs a chunk may change; results do not."""
    for value in (idle_us, join_us):
        if value is not None and value < 0:
            raise ValueError(f"a spin window is >= 0 microseconds, got {value}")
    _lib().hector_pool_set_spin(
        -1 if idle_us is None else round(idle_us * 1000),
        -1 if join_us is None else round(join_us * 1000),
    )


def available() -> bool:
    """Whether team calls are turned on (:data:`ENV`) and the process has an OpenMP runtime to
    run them on (PyTorch's)."""
    if os.environ.get(ENV, "") != "1":
        return False
    return bool(_lib().hector_team_available())


def queued_chunks() -> int:
    """How many workers' chunks team calls have queued for their teams since the process
    started (chunks dispatched outside team calls go to MLIR's pool and are not counted)."""
    return int(_lib().hector_team_queued())


def pool_enabled() -> bool:
    """Whether calls other than team calls are pool calls (:data:`POOL_ENV` is not ``0``)."""
    return os.environ.get(POOL_ENV, "") != "0"


@dataclass(frozen=True)
class PoolCounts:
    """Pool calls since the process started: chunks queued, of those run by a helper, the
    helper threads started (a forked child counts its own), and the times a helper went to
    sleep between calls (its idle spin window over with no call)."""

    queued: int
    helped: int
    helpers: int
    naps: int = 0


def pool_counts() -> PoolCounts:
    """The process's :class:`PoolCounts`."""
    lib = _lib()
    return PoolCounts(
        int(lib.hector_pool_queued()),
        int(lib.hector_pool_helped()),
        lib.hector_pool_helpers(),
        int(lib.hector_pool_naps()),
    )


def skip_regions(calls: int) -> None:
    """Make the next ``calls`` team calls run without a region (as pool calls, or solo with
    pool calls off), as after a team call whose helpers ran none of its chunks; for tests,
    where that otherwise depends on the scheduler."""
    _lib().hector_team_set_solo_calls(calls)


def set_fallbacks(mlir_runtime: dict[str, ctypes.c_void_p]) -> None:
    """Bind MLIR's own entry points of :data:`REPLACED` (addresses by name): what the
    replacements call outside a team call."""
    _lib().hector_team_set_fallbacks(*(mlir_runtime[name] for name in REPLACED))


def engine_symbols() -> dict[str, ctypes.c_void_p]:
    """The addresses an ExecutionEngine binds the entry points of :data:`REPLACED` to."""
    return {
        name: ctypes.cast(getattr(_lib(), ours), ctypes.c_void_p) for name, ours in REPLACED.items()
    }


def call(run: Callable[[], None], threads: int = 0) -> None:
    """Run ``run()`` (a compiled function's call) on this thread inside a parallel region of
    ``threads`` OpenMP threads (0: the runtime's default, ``torch.get_num_threads()``), the
    others running the chunks it dispatches; when team calls are unavailable, as a pool call
    with at most ``threads - 1`` helpers (0: the same default), or directly with
    ``HECTOR_POOL_CALLS=0``. An exception ``run`` raises is raised here."""
    if not available():
        if not pool_enabled():
            run()
            return
        handle = _lib().hector_pool_begin(threads)
        try:
            run()
        finally:
            _lib().hector_pool_end(handle)
        return
    raised: list[BaseException] = []

    def body(_: int | None) -> None:
        try:
            run()
        except BaseException as err:  # noqa: BLE001 - raised again below, on this thread
            raised.append(err)

    _lib().hector_team_call(_BODY(body), None, threads, int(pool_enabled()))
    if raised:
        raise raised[0]
