"""The offload scheduler: the I/O of saved storages through the native store.

:class:`OffloadScheduler` moves each saved storage through its states (in memory, being
written, on disk, being read, loaded; failed or discarded): it starts writes (through pinned
staging for CUDA tensors), collects completions, serves unpacks (:meth:`OffloadScheduler.load`,
reading back through :class:`~hector.offload.read_back.ReadBack`) and frees what autograd
releases. Every method that touches entries runs with :attr:`OffloadScheduler.lock` held.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
import warnings

import torch

from hector.runtime import libc_heap
from hector.runtime.offload import OffloadIOError
from hector.runtime.offload_entries import Entry, Group, SavedEntries

from .budget import MemoryBudget
from .errors import OffloadError
from .host_policy import HostMemory
from .read_back import ReadBack
from .stats import CacheStatistics
from .store import LazyStore

__all__ = ["OffloadScheduler", "SavedHandle"]


class SavedHandle:
    """What autograd keeps instead of an offloaded tensor: the entry and the view geometry."""

    __slots__ = ("scheduler", "entry", "dtype", "size", "stride", "offset", "__weakref__")

    def __init__(self, scheduler: OffloadScheduler, entry: Entry, t: torch.Tensor) -> None:
        self.scheduler = scheduler
        self.entry = entry
        self.dtype = t.dtype
        self.size = tuple(t.shape)
        self.stride = tuple(t.stride())
        self.offset = t.storage_offset()

    def __del__(self) -> None:
        try:
            self.scheduler.release(self.entry)
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


class OffloadScheduler:
    """The writes, reads and releases of one cache's saved storages (see the module).

    Args:
        store: the cache's store (opened on first use, never reopened once closed).
        stats: the cache's counters, timings and resident bytes.
        host: what becomes of freed CPU memory (the host-memory policy).
        budget: the memory budget (forwards wait for writes, reads ahead stay within it).
        ahead: how many groups before the one backward is in are prefetched.
        readahead_bytes: the read-ahead window (``"auto"``, bytes, or None: unbounded).
        on_write_error: ``"keep"`` (warn, keep the tensor) or ``"raise"`` (at the next flush).
    """

    def __init__(
        self,
        store: LazyStore,
        stats: CacheStatistics,
        host: HostMemory,
        budget: MemoryBudget,
        *,
        ahead: int,
        readahead_bytes: int | str | None,
        on_write_error: str,
    ) -> None:
        self.store = store
        self._stats = stats
        self.host = host
        self.on_write_error = on_write_error
        self.lock = threading.RLock()
        self.entries = SavedEntries()
        #: Reading back for backward (``ahead``, ``readahead_bytes``).
        self.reads = ReadBack(
            self.entries, stats, store, budget, ahead=ahead, readahead_bytes=readahead_bytes
        )
        self._writing: dict[int, Entry] = {}  # by key: writes whose outcome is not known yet
        self._unraised: list[OffloadIOError] = []  # on_write_error="raise": for the next flush
        self.errors: list[OffloadIOError] = []

    # ---- saving ---------------------------------------------------------------------------------
    def save(
        self,
        storage: torch.UntypedStorage,
        nbytes: int,
        key: tuple[str, int],
        device: torch.device,
        group: Group,
        offload: bool,
    ) -> Entry:
        """A new entry for ``storage`` (``nbytes``, alias ``key``) in ``group``: its write
        starts when ``offload``, else it is kept. If starting the write fails, nothing is
        registered."""
        entry = self.entries.new(storage, nbytes, device)
        entry.group = group
        # Write first: if starting it fails, nothing is registered (no entry leaks).
        if offload:
            self._start_write(entry)
        else:
            self._stats.counters["kept"] += 1
        self.entries.register(key, entry)
        self._stats.add_resident(nbytes)
        self._stats.counters["packed"] += 1
        return entry

    def _start_write(self, e: Entry) -> None:
        assert e.storage is not None
        store = self.store.get()
        timing = self._stats.timing
        if e.device.type == "cuda":  # pinned staging: device → pinned host, then to the store
            start = time.perf_counter_ns()
            staging = torch.empty(e.nbytes, dtype=torch.uint8, pin_memory=True)
            src = torch.empty((0,), dtype=torch.uint8, device=e.device).set_(e.storage)
            staging.copy_(src, non_blocking=True)
            torch.cuda.current_stream(e.device).synchronize()
            e.buffer = staging
            address = staging.data_ptr()
            timing["staging_ns"] += time.perf_counter_ns() - start
        else:
            address = e.storage.data_ptr()
        e.phase = address % libc_heap.BLOCK
        start = time.perf_counter_ns()
        e.key = store.write(address, e.nbytes)
        timing["submit_ns"] += time.perf_counter_ns() - start
        e.state = "writing"
        self._writing[e.key] = e
        self._stats.counters["offloaded"] += 1
        self._stats.counters["bytes_offloaded"] += e.nbytes
        self.entries.writing(e)

    def make_room(self, nbytes: int, limit: int) -> None:
        """Wait for the oldest writes in flight, their memory then handed back, until the
        saved bytes held in memory plus ``nbytes`` fit ``limit`` or no write is in flight
        (``limit`` 0: wait for them all). How a budget bounds what a forward holds while
        the store is slower than the forward saves."""
        while self._writing and self._stats.resident_bytes + nbytes > limit:
            self._finish_write(next(iter(self._writing.values())))

    def wait_for_writes(self) -> None:
        """Wait for every write in flight (their memory then handed back). Called outside the
        saved-tensor hooks (the profiler, at a scope's end): what it spends waiting and
        handing pages back is counted as ``outside_ns``, not as the hooks' parts."""
        timing = self._stats.timing
        parts = ("write_wait_ns", "madvise_ns")
        before = {k: timing[k] for k in parts}
        with self.lock:
            self.make_room(0, 0)
        for k in parts:
            timing["outside_ns"] += timing[k] - before[k]
            timing[k] = before[k]

    # ---- completions ----------------------------------------------------------------------------
    def drain(self) -> None:
        """Collect the completed writes and reads, and hand back pending memory."""
        store = self.store.opened
        if store is None:
            return
        if not self.entries.offloaded and not self.host.pending:
            return  # nothing in flight to complete, nothing to hand back: skip the native call
        start = time.perf_counter_ns()
        try:
            self.host.release_pending()
            for key in store.completions():
                e = self.entries.by_key.get(key)
                if e is None:
                    continue
                if e.state == "writing":
                    self._write_done(e)
                elif e.state == "reading":
                    with contextlib.suppress(OffloadIOError):  # raised again by materialize
                        if store.poll(key):
                            e.state = "loaded"
        finally:
            self._stats.timing["drain_ns"] += time.perf_counter_ns() - start

    def _finish_write(self, e: Entry) -> None:
        """Wait for the write of ``e`` and record its outcome (it reads ``e``'s memory)."""
        store = self.store.opened
        if store is None:  # closed directly: its close waited
            self._writing.pop(e.key, None)
            return
        start = time.perf_counter_ns()
        with contextlib.suppress(OffloadIOError):  # recorded by _write_done
            store.wait(e.key)
        self._stats.timing["write_wait_ns"] += time.perf_counter_ns() - start
        self._write_done(e)

    def _write_done(self, e: Entry) -> None:
        """Record the outcome of a completed write: each failure is reported exactly once."""
        self._writing.pop(e.key, None)
        try:
            self.store.get().poll(e.key)
        except OffloadIOError as err:
            e.state = "failed"  # the storage stays referenced: nothing is lost
            self._stats.counters["write_errors"] += 1
            # Kept without its traceback, whose frames would keep this step's graph alive.
            self.errors.append(err.with_traceback(None))
            if e.device.type == "cuda":
                e.buffer = None
            if self.on_write_error == "raise":
                self._unraised.append(err)
            else:
                warnings.warn(
                    f"hector.offload: {err}; the tensor stays in memory",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return
        e.state = "stored"
        if e.device.type == "cuda":
            e.buffer = None
        if not e.wanted:
            storage, e.storage = e.storage, None
            self.host.let_go(storage, e.device)
            del storage
            self._stats.add_resident(-e.nbytes)
            self.host.freed_after_write(e.nbytes, e.device)

    # ---- reading back ---------------------------------------------------------------------------
    def load(self, e: Entry) -> tuple[torch.UntypedStorage, int]:
        """Backward unpacks ``e``: read ahead of it, and the memory holding its bytes with
        the byte offset they start at (read back, waited for, if needed).

        Raises:
            OffloadError: the cache was force-closed before this backward ran.
            OffloadIOError: reading it back failed (this backward is then over).
        """
        with self.lock:
            if e.state == "discarded":
                raise OffloadError(
                    "backward needs a tensor saved through an offload cache that was closed "
                    "with close(force=True) before this backward ran; run backward before "
                    "closing the cache"
                )
            self.drain()
            group = e.group
            if self.entries.offloaded:  # otherwise there is nothing to read ahead
                self.reads.read_ahead(group)
            try:
                return self.reads.materialize(e)
            except BaseException:
                self.entries.orphan_pass(group[0])  # this backward is over
                raise

    # ---- releasing ------------------------------------------------------------------------------
    def release(self, e: Entry) -> None:
        """Autograd let go of a handle of ``e``: free ``e`` once it holds none."""
        start = time.perf_counter_ns()
        try:
            self._release_entry(e)
        finally:
            self._stats.timing["release_ns"] += time.perf_counter_ns() - start

    def _release_entry(self, e: Entry) -> None:
        with self.lock:
            e.refs -= 1
            if e.refs > 0:
                return
            self.entries.unregister(e)
            if not self.entries.groups:  # the last saved tensor: backward is over
                self.host.release_pending(final=True)
            if e.state == "discarded":
                return
            if e.state == "writing":
                # The write still reads this memory (or its staging buffer): wait before
                # freeing it, and record a failure now rather than lose it.
                self._finish_write(e)
            elif e.state == "reading":
                # A prefetch nobody consumed (the graph was dropped): the read still fills
                # this buffer, so it must land before the buffer is freed.
                self.reads.finish_read(e)
            if e.key:
                self.entries.by_key.pop(e.key, None)
                store = self.store.opened
                if store is not None:
                    # Cheap: the store keeps the file for a later write (no unlink, which
                    # cost 4-10 ms here with its blocks discarded) while its files stay
                    # within the most it held at once.
                    store.remove(e.key)
            held = e.storage is not None or (e.buffer is not None and e.device.type == "cpu")
            if held:
                self._stats.add_resident(-e.nbytes)
            read_back = e.buffer is not None
            buffer = e.buffer.untyped_storage() if e.buffer is not None else None
            e.storage = None
            e.buffer = None
            self.host.let_go(buffer, e.device)
            del buffer
            reads = self.reads
            if read_back and not e.orphaned and reads.window() is not None and not self.closed:
                reads.read_ahead(e.group)  # the window has room again: start the next reads

    # ---- end of a forward, end of the cache -----------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self.store.closed

    def flush(self) -> None:
        """With ``on_write_error="raise"``: wait for the writes in flight and raise a failure
        (see ``TensorCache.flush``).

        Raises:
            OffloadIOError: the first write that failed since the last flush.
        """
        with self.lock:
            if self.closed:
                return
            if self.on_write_error == "raise":
                for e in list(self._writing.values()):
                    self._finish_write(e)
            if not self._unraised:
                return
            recorded, rest = self._unraised[0], len(self._unraised) - 1
            self._unraised.clear()
        # A copy is raised: a traceback on the recorded error (kept in ``errors``) would keep
        # the frames of this forward, and so its autograd graph, alive.
        error = type(recorded)(recorded.errno, recorded.strerror, recorded.filename)
        if rest:
            error.add_note(f"{rest} more write(s) failed since; see TensorCache.errors")
        raise error

    def step_failed(self, pass_: int) -> None:
        """Pass ``pass_`` raised: its graph is dead, even if a traceback still holds it."""
        with self.lock:
            self.entries.orphan_pass(pass_)

    def saved_tensors_alive(self) -> int:
        """How many saved storages autograd still references, outside steps that raised."""
        with self.lock:
            return self.entries.alive()

    def check_no_step_in_flight(self) -> None:
        """Raise :class:`OffloadError` while saved tensors are referenced by autograd."""
        alive = self.saved_tensors_alive()
        if alive:
            gc.collect()  # a graph kept only by a reference cycle is not a step in flight
            alive = self.saved_tensors_alive()
        if alive:
            raise OffloadError(
                f"close() during a step: {alive} saved tensor(s) of this offload cache are still "
                "referenced by autograd (a forward whose backward has not run). Run backward "
                "(or drop its outputs, e.g. `del loss`) before close(), or call "
                "close(force=True) to discard them (that backward then fails)"
            )

    def close(self) -> None:
        """Close the store (deleting its files, keeping its statistics) and discard every
        saved tensor: their handles now fail."""
        with self.lock:
            self.store.close()  # waits for the I/O still reading saved memory
            self.entries.discard()
            self.host.pending.clear()
            self._writing.clear()
            self._unraised.clear()
            self._stats.resident_bytes = 0
