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
it ran), the next few calls run solo: every chunk on the calling thread at its join, with no
region to start and end.

Team calls are off unless ``HECTOR_TEAM_CALLS=1``: on the 2-core machine the project is
measured on, shared with other jobs, they made the RGCN route's kernels slower (the region's
start and end wait for a thread the scheduler has not run); they are meant for a machine whose
cores the process has to itself, where measured before they become the default.

This module depends only on ctypes, like the rest of the runtime binding.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

from . import native

__all__ = [
    "ENV",
    "REPLACED",
    "available",
    "call",
    "engine_symbols",
    "queued_chunks",
    "set_fallbacks",
]

#: Environment variable: ``1`` runs compiled functions as team calls; unset or anything else,
#: without (the chunks go to MLIR's pool).
ENV = "HECTOR_TEAM_CALLS"
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
    lib.hector_team_call.argtypes = [_BODY, ctypes.c_void_p, ctypes.c_int]
    lib.hector_team_call.restype = None
    lib.hector_team_queued.argtypes = []
    lib.hector_team_queued.restype = ctypes.c_uint64
    lib.hector_team_available.argtypes = []
    lib.hector_team_available.restype = ctypes.c_int
    lib.hector_team_set_fallbacks.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.hector_team_set_fallbacks.restype = None
    return lib


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
    others running the chunks it dispatches; directly when team calls are unavailable. An
    exception ``run`` raises is raised here."""
    if not available():
        run()
        return
    raised: list[BaseException] = []

    def body(_: int | None) -> None:
        try:
            run()
        except BaseException as err:  # noqa: BLE001 - raised again below, on this thread
            raised.append(err)

    _lib().hector_team_call(_BODY(body), None, threads)
    if raised:
        raise raised[0]
