"""What the tensor cache raises and warns: its misuse errors and its huge-page advice."""

from __future__ import annotations

__all__ = ["CLOSED_HINT", "HugePagesAdvice", "MemoryBudgetWarning", "OffloadError"]


class HugePagesAdvice(UserWarning):
    """An adaptive CPU offload's activations are large enough for huge pages, which this
    process does not have (:attr:`TensorCache.huge_pages_advice`)."""


class MemoryBudgetWarning(UserWarning):
    """A ``memory_budget`` smaller than what offloading every scope still holds (the saved
    bytes outside every scope and one scope read back): the plan offloads every scope."""


class OffloadError(RuntimeError):
    """Misuse of the tensor cache (bad policy, plan not matching the model, closed cache)."""


#: What to do instead of using a closed cache, appended to the errors that say it is closed.
CLOSED_HINT = (
    "wrap the model again with hector.offload(model, ...) (or create a new TensorCache) to keep "
    "offloading, or call the unwrapped model"
)
