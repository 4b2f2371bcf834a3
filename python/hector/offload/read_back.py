"""Reading offloaded storages back for backward: reads ahead within a window, then unpacks.

Backward unpacks the groups (one per scope entered) in reverse forward order. When it needs a
group, :class:`ReadBack` starts that group's reads and those of the ``ahead`` groups before it:
all at once without a window; with ``readahead_bytes``, a previous group only while the
offloaded bytes held in memory plus its own stay within the window and all saved bytes held
within the memory budget (or when nothing is held), so reads land just in time instead of
all at the start of backward. An unpack then gets its storage from memory (a write still in
flight or failed, a read done) or waits for its read (:meth:`ReadBack.materialize`); a CPU
read-back buffer starts in phase with the store's file (its bytes at ``shift``), a CUDA one
is pinned and copied to the device. Every method runs with the scheduler's lock held.
"""

from __future__ import annotations

import contextlib
import time

import torch

from hector.runtime import libc_heap
from hector.runtime.offload import OffloadIOError
from hector.runtime.offload_entries import Entry, Group, SavedEntries

from .budget import MemoryBudget
from .stats import CacheStatistics
from .store import LazyStore

__all__ = ["ReadBack"]


class ReadBack:
    """The reads of one cache's offloaded storages (see the module).

    Args:
        entries: the cache's saved storages.
        stats: the cache's counters, timings and resident bytes.
        store: the cache's store.
        budget: the memory budget (reads ahead stay within it).
        ahead: how many groups before the one backward is in are prefetched.
        readahead_bytes: the read-ahead window (``"auto"``, bytes, or None: unbounded).
    """

    def __init__(
        self,
        entries: SavedEntries,
        stats: CacheStatistics,
        store: LazyStore,
        budget: MemoryBudget,
        *,
        ahead: int,
        readahead_bytes: int | str | None,
    ) -> None:
        self._entries = entries
        self._stats = stats
        self._store = store
        self._budget = budget
        self.ahead = ahead
        self.readahead_bytes = readahead_bytes

    def read_ahead(self, group: Group) -> None:
        """Backward needs ``group``: fetch it and start the reads of the groups before it.

        Without a window, the ``ahead`` previous groups start at once. With
        ``readahead_bytes``, a previous group starts only while the offloaded bytes held in
        memory plus its own stay within the window, and all saved bytes held within the
        memory budget, (or when nothing is held) so reads land just in time instead of all
        at the start of backward.
        """
        self._prefetch_group(group)
        window = self.window()
        if window is None:
            for g in range(group[1] - 1, group[1] - self.ahead - 1, -1):
                self._prefetch_group((group[0], g))
            return
        budget = self._budget.bytes
        held = -1  # computed only when a group has something to read
        for g in range(group[1] - 1, group[1] - self.ahead - 1, -1):
            need = self._entries.bytes_to_read((group[0], g))
            if not need:
                continue
            if held < 0:
                held = self._entries.held_offloaded_bytes()
            over = budget is not None and self._stats.resident_bytes + need > budget
            if held and (held + need > window or over):
                return
            self._prefetch_group((group[0], g))
            held += need

    def window(self) -> int | None:
        """The read-ahead window in bytes (None: unbounded)."""
        if self.readahead_bytes == "auto":
            return self._entries.largest_group * 3 // 2
        assert self.readahead_bytes is None or isinstance(self.readahead_bytes, int)
        return self.readahead_bytes

    def _prefetch_group(self, group: Group) -> None:
        for e in list(self._entries.offloaded.get(group, {}).values()):
            if e.state == "writing":
                e.wanted = True  # keep it in memory when the write completes
            elif e.state == "stored" and e.storage is None and e.buffer is None:
                self._start_read(e)
                self._stats.counters["prefetched"] += 1

    def _start_read(self, e: Entry) -> None:
        pin = e.device.type == "cuda"
        timing = self._stats.timing
        start = time.perf_counter_ns()
        e.buffer, e.shift = libc_heap.in_phase_buffer(e.nbytes, e.phase, pin)
        submitted = time.perf_counter_ns()
        timing["alloc_ns"] += submitted - start
        self._stats.add_resident(e.nbytes)
        self._store.get().read(e.key, e.buffer.data_ptr(), e.nbytes)
        timing["submit_ns"] += time.perf_counter_ns() - submitted
        e.state = "reading"

    def finish_read(self, e: Entry) -> None:
        """Wait for the read of ``e`` (its buffer is about to be freed); errors do not matter."""
        store = self._store.opened
        if store is None:  # closed directly: its close waited
            return
        start = time.perf_counter_ns()
        with contextlib.suppress(OffloadIOError):
            store.wait(e.key)
        self._stats.timing["read_wait_ns"] += time.perf_counter_ns() - start
        e.state = "loaded"

    def materialize(self, e: Entry) -> tuple[torch.UntypedStorage, int]:
        """The memory holding ``e``'s bytes and the byte offset they start at in it (a
        read-back buffer starts in phase with the store's file), read back if needed.

        Raises:
            OffloadIOError: reading it back failed.
        """
        if e.storage is not None:
            if e.state != "memory":
                self._stats.counters["served_from_memory"] += 1
            return e.storage, 0
        if e.state == "stored" and e.buffer is None:
            self._start_read(e)
        if e.state == "reading":
            start = time.perf_counter_ns()
            self._stats.counters["read_waits"] += 1
            try:
                self._store.get().wait(e.key)
            except OffloadIOError:
                e.state = "stored"
                self._stats.add_resident(-e.nbytes)
                e.buffer = None
                raise
            finally:
                waited = time.perf_counter_ns() - start
                self._stats.timing["read_wait_ns"] += waited
                self._stats.read_wait_s += waited * 1e-9
            e.state = "loaded"
        assert e.buffer is not None
        if e.device.type == "cuda":
            data = e.buffer.to(e.device, non_blocking=True)
            e.storage = data.untyped_storage()
            e.buffer = None
            return e.storage, 0
        return e.buffer.untyped_storage(), e.shift
