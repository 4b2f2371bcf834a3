"""The memory budget: the saved activation bytes a tensor cache may hold in memory at once.

``memory_budget`` is a byte count or a fraction of what one step saves; :class:`MemoryBudget`
holds it in bytes once they are known (a fraction: after the first forward measured the step's
saved bytes). The forward waits for writes in flight rather than hold more
(:meth:`~hector.offload.scheduler.OffloadScheduler.make_room`), backward reads ahead only
within it (:class:`~hector.offload.read_back.ReadBack`), and the adaptive plan is made to fit
it (:func:`~hector.passes.offload_model.plan_within_budget`).
"""

from __future__ import annotations

__all__ = ["MemoryBudget"]


class MemoryBudget:
    """A checked ``memory_budget`` (:class:`~hector.offload.options.CacheOptions`), in bytes
    once known.

    Attributes:
        bytes: the bound in bytes (None: no budget, or a fraction not measured yet).
        fraction: the fraction of one step's saved bytes given (None: bytes or no budget).
    """

    def __init__(self, budget: int | float | None) -> None:
        self.fraction = budget if isinstance(budget, float) else None
        self.bytes: int | None = budget if isinstance(budget, int) else None

    @property
    def pending(self) -> bool:
        """Whether a fraction still waits for the first forward's saved bytes."""
        return self.fraction is not None and self.bytes is None

    def measured(self, saved_bytes: int) -> None:
        """The first forward saved ``saved_bytes`` (keep-all's memory): the fraction becomes
        bytes (at least one)."""
        assert self.fraction is not None
        self.bytes = max(int(self.fraction * saved_bytes), 1)
