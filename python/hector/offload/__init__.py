"""``hector.offload``: activation offloading to SSD.

``hector.offload`` is a callable package: ``hector.offload(model, policy=...)`` (the same as
:func:`wrap`) wraps a model so that the activations its forward saves for backward
go to the native SSD store and come back for backward; the package also exports the pieces::

    import hector

    model = hector.offload(model, policy="adaptive")  # "all" | "none" | Plan | plan file
    model = hector.offload(model, memory_budget=0.5)  # activations held <= half of keep-all's
    for x, y in batches:
        loss = loss_fn(model(x), y)
        loss.backward()
    print(model.cache.stats())
    model.close()  # after the last backward: deletes the store's files (also done at exit)

    cache = hector.offload.attach(model)  # in place, no wrapper (Hugging Face Trainer, ...)

    with hector.offload.TensorCache(policy="all") as cache:  # any code, no module
        loss = f(x)
        loss.backward()

On CPU an offloading cache installs Hector's caching CPU allocator (process-wide) so that the
process's peak memory falls with the offloaded bytes; :func:`enable_caching_allocator` installs
it earlier (before the model, so the parameters come from it too) or with other limits, and
``HECTOR_CPU_ALLOCATOR=pytorch`` keeps PyTorch's own. See docs/offload.md for the planner rule,
the plan IR and the runtime.
"""

from __future__ import annotations

import sys
import types
from typing import Any, cast

import torch
from torch import nn
from torch._dynamo.eval_frame import skip_code

from hector.runtime import cpu_allocator
from hector.runtime.hugepages import enable_huge_pages, huge_pages_advice, huge_pages_in_effect
from hector.runtime.offload import ChecksumError, OffloadIOError, ShortIOError, TensorStore

from .cache import HugePagesAdvice, OffloadedModule, OffloadError, TensorCache, default_scopes
from .compiled import unwrap_compiled
from .errors import MemoryBudgetWarning
from .plan import Plan, PlanError, PlanWithoutIRWarning, measure_write_bandwidth

__all__ = [
    "ChecksumError",
    "HugePagesAdvice",
    "MemoryBudgetWarning",
    "OffloadError",
    "OffloadIOError",
    "OffloadedModule",
    "Plan",
    "PlanError",
    "PlanWithoutIRWarning",
    "ShortIOError",
    "TensorCache",
    "TensorStore",
    "attach",
    "default_scopes",
    "enable_caching_allocator",
    "enable_huge_pages",
    "huge_pages_advice",
    "huge_pages_in_effect",
    "measure_write_bandwidth",
    "wrap",
]


def enable_caching_allocator(
    cache_limit: int = cpu_allocator.DEFAULT_CACHE_LIMIT,
    min_block: int = cpu_allocator.DEFAULT_MIN_BLOCK,
) -> None:
    """Serve this process's CPU tensors of ``min_block`` bytes or more from Hector's caching
    allocator, keeping up to ``cache_limit`` bytes of freed blocks for the next of their size
    (:mod:`hector.runtime.cpu_allocator`; docs/offload.md, "Caching CPU allocator").

    Caches that offload install it themselves (``release_memory="auto"``, the default, with
    the default limits); call this first to set other limits, or before the model exists so
    its blocks come from the allocator too. Caches then leave freed activations to it
    (``"allocator"``): they are reused by the next block's activations instead of handed back
    and faulted in again; results do not change. The first call in a machine builds it
    against the installed PyTorch (a C++17 compiler and ninja, seconds).

    Raises:
        hector.runtime.cpu_allocator.CpuAllocatorError: it cannot be built here, or a limit
            is out of range.
    """
    cpu_allocator.install(cache_limit, min_block)


def wrap(
    model: nn.Module,
    policy: str | Plan = "adaptive",
    *,
    compile: bool | dict[str, Any] = False,  # noqa: A002  (the option's natural name)
    **options: Any,
) -> OffloadedModule:
    """Wrap ``model`` so its saved activations are offloaded according to ``policy``.

    Args:
        model: the module to train (may be a ``DistributedDataParallel`` wrapper; each rank
            process then has its own store).
        policy: ``"adaptive"`` (``warmup_steps`` steps, 2 by default, then one profiled
            step, all offloading everything; then plan from the profile and the bandwidth the
            store gave them, follow the plan from the next step), ``"all"``, ``"none"``, a
            :class:`Plan`, or the path of a plan file.
        compile: True, or a dict of ``torch.compile`` keyword arguments: the same as
            ``hector.offload(torch.compile(model, **compile), ...)`` — the model runs by
            compiled regions, one per scope (docs/offload-your-model.md, "Compiled models").
        **options: forwarded to :class:`TensorCache` (``memory_budget``, ``threshold``,
            ``ahead``, ``root``, ``threads``, ``direct``, ``on_write_error``, ``scopes``,
            ``write_bandwidth``, ...).

    Returns:
        An :class:`OffloadedModule`; its ``cache`` holds statistics and the plan.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"hector.offload expects a torch.nn.Module, got {type(model).__name__}")
    if compile is not False:
        model = cast(nn.Module, torch.compile(model, **({} if compile is True else compile)))
    model, callback = unwrap_compiled(model)
    return OffloadedModule(model, TensorCache(policy, model, compile_callback=callback, **options))


def attach(model: nn.Module, policy: str | Plan = "adaptive", **options: Any) -> TensorCache:
    """Offload ``model``'s saved activations in place: its own forward runs under the cache's
    hooks (forward hooks on ``model``), with no wrapper, so code that needs the model itself
    takes it unchanged — Hugging Face ``Trainer``, ``accelerate``'s ``prepare``, saving and
    loading its state dict. Same ``policy`` and ``options`` as :func:`wrap`; returns the
    cache (statistics, plan); ``cache.close()`` removes the hooks and the store's files,
    leaving the model as it was.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"hector.offload expects a torch.nn.Module, got {type(model).__name__}")
    if unwrap_compiled(model)[1] is not None:
        raise TypeError(
            "hector.offload.attach takes the model itself: attach to it, then torch.compile it "
            "(or use hector.offload(torch.compile(model)))"
        )
    cache = TensorCache(policy, model, **options)
    entered: list[tuple[Any, Any]] = []

    def enter(module: nn.Module, args: Any) -> None:
        prior = cache.regions.enter()  # under torch.compile: the model by compiled regions
        entered.append((prior, cache.hooks()))
        entered[-1][1].__enter__()

    def leave(module: nn.Module, args: Any, output: Any) -> None:
        prior, hooks = entered.pop()
        hooks.__exit__(None, None, None)
        cache.regions.leave(prior)
        if sys.exc_info()[0] is not None:  # called by PyTorch while the forward raises
            cache.scheduler.step_failed(cache.scope_tracker.pass_)

    # Dynamo skips these frames (they switch its callback), not the frames they call.
    skip_code(enter.__code__)
    skip_code(leave.__code__)

    cache._hooks.append(model.register_forward_pre_hook(enter, prepend=True))
    cache._hooks.append(model.register_forward_hook(leave, always_call=True))
    return cache


class _CallableModule(types.ModuleType):
    """Lets ``hector.offload(...)`` call :func:`wrap` while staying a package."""

    def __call__(
        self, model: nn.Module, policy: str | Plan = "adaptive", **options: Any
    ) -> OffloadedModule:
        """``hector.offload(model, policy, **options)`` is :func:`wrap`."""
        return wrap(model, policy, **options)


sys.modules[__name__].__class__ = _CallableModule
# ``hector.offload`` is exported lazily by ``hector/__init__.py`` as the attribute ``offload``
# of this package: that attribute is the (callable) package itself, so ``hector.offload`` is
# the same object however it was first reached.
offload = sys.modules[__name__]
