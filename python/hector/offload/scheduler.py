"""The offload scheduler: the I/O of saved storages through the native store.

:class:`OffloadScheduler` moves each saved storage through its states (in memory, being
written, on disk, being read, loaded; failed or discarded): it starts writes (through pinned
staging for CUDA tensors), collects completions, reads groups back ahead of backward within a
read-ahead window, serves unpacks (:meth:`OffloadScheduler.load`) and frees what autograd
releases. Every method that touches entries runs with :attr:`OffloadScheduler.lock` held.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
import time
import warnings
from typing import Any

import torch

from hector.runtime import libc_heap
from hector.runtime.offload import OffloadIOError, TensorStore
from hector.runtime.offload_entries import Entry, Group, SavedEntries

from .errors import CLOSED_HINT, OffloadError
from .host_policy import HostMemory
from .stats import CacheStatistics

__all__ = ["OffloadScheduler", "SavedHandle", "StoreOptions"]


class StoreOptions:
    """How the scheduler opens its store (:class:`TensorStore`'s ``root``, ``threads``,
    ``chunk_bytes`` and ``direct``), lazily, keeping files for the next write of a size."""

    def __init__(self, root: str | None, threads: int, chunk_bytes: int, direct: bool) -> None:
        self.open = functools.partial(
            TensorStore,
            root=root,
            threads=threads,
            chunk_bytes=chunk_bytes,
            direct=direct,
            keep_files=True,  # training writes the same sizes every step: overwrite, not create
        )


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
        store: how to open the store (on first use, never reopened once closed).
        stats: the cache's counters, timings and resident bytes.
        host: what becomes of freed CPU memory (the host-memory policy).
        ahead: how many groups before the one backward is in are prefetched.
        readahead_bytes: the read-ahead window (``"auto"``, bytes, or None: unbounded).
        on_write_error: ``"keep"`` (warn, keep the tensor) or ``"raise"`` (at the next flush).
    """

    def __init__(
        self,
        store: StoreOptions,
        stats: CacheStatistics,
        host: HostMemory,
        *,
        ahead: int,
        readahead_bytes: int | str | None,
        on_write_error: str,
    ) -> None:
        self._open_store = store.open
        self._stats = stats
        self.host = host
        self.ahead = ahead
        self.readahead_bytes = readahead_bytes
        #: The activation bytes the cache may hold in memory (``memory_budget``; None: no
        #: bound): reads ahead of backward start only within it (:meth:`read_ahead`).
        self.budget: int | None = None
        self.on_write_error = on_write_error
        self._store: TensorStore | None = None
        self.lock = threading.RLock()
        self.entries = SavedEntries()
        self._writing: dict[int, Entry] = {}  # by key: writes whose outcome is not known yet
        self._unraised: list[OffloadIOError] = []  # on_write_error="raise": for the next flush
        self.closed = False
        self._closed_store_stats: dict[str, Any] | None = None
        self.errors: list[OffloadIOError] = []

    @property
    def store(self) -> TensorStore:
        """The process's store (opened on first use, never reopened once closed).

        Raises:
            OffloadError: the cache (or its store) was closed.
        """
        if self.closed:
            raise OffloadError(f"this offload cache is closed; {CLOSED_HINT}")
        if self._store is None:
            self._store = self._open_store()
        elif self._store.closed:
            raise OffloadError(
                f"the offload store {self._store.path} was closed directly; {CLOSED_HINT}"
            )
        return self._store

    def check_open(self) -> None:
        """Raise :class:`OffloadError` if the cache was closed."""
        if self.closed:
            raise OffloadError(f"this offload cache is closed; {CLOSED_HINT}")

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
        store = self.store
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

    # ---- completions ----------------------------------------------------------------------------
    def drain(self) -> None:
        """Collect the completed writes and reads, and hand back pending memory."""
        if self._store is None or self._store.closed:
            return
        if not self.entries.offloaded and not self.host.pending:
            return  # nothing in flight to complete, nothing to hand back: skip the native call
        start = time.perf_counter_ns()
        try:
            self._drain_completions()
        finally:
            self._stats.timing["drain_ns"] += time.perf_counter_ns() - start

    def _drain_completions(self) -> None:
        assert self._store is not None
        self.host.release_pending()
        for key in self._store.completions():
            e = self.entries.by_key.get(key)
            if e is None:
                continue
            if e.state == "writing":
                self._write_done(e)
            elif e.state == "reading":
                with contextlib.suppress(OffloadIOError):  # raised again by _materialize
                    if self._store.poll(key):
                        e.state = "loaded"

    def _finish_write(self, e: Entry) -> None:
        """Wait for the write of ``e`` and record its outcome (it reads ``e``'s memory)."""
        if self._store is None or self._store.closed:  # closed directly: its close waited
            self._writing.pop(e.key, None)
            return
        start = time.perf_counter_ns()
        with contextlib.suppress(OffloadIOError):  # recorded by _write_done
            self._store.wait(e.key)
        self._stats.timing["write_wait_ns"] += time.perf_counter_ns() - start
        self._write_done(e)

    def _finish_read(self, e: Entry) -> None:
        """Wait for the read of ``e`` (its buffer is about to be freed); errors do not matter."""
        if self._store is None or self._store.closed:  # closed directly: its close waited
            return
        start = time.perf_counter_ns()
        with contextlib.suppress(OffloadIOError):
            self._store.wait(e.key)
        self._stats.timing["read_wait_ns"] += time.perf_counter_ns() - start
        e.state = "loaded"

    def _write_done(self, e: Entry) -> None:
        """Record the outcome of a completed write: each failure is reported exactly once."""
        self._writing.pop(e.key, None)
        try:
            self.store.poll(e.key)
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
    def read_ahead(self, group: Group) -> None:
        """Backward needs ``group``: fetch it and start the reads of the groups before it.

        Without a window, the ``ahead`` previous groups start at once. With
        ``readahead_bytes``, a previous group starts only while the offloaded bytes held in
        memory plus its own stay within the window, and all saved bytes held within
        :attr:`budget`, (or when nothing is held) so reads land just in time instead of all
        at the start of backward.
        """
        self._prefetch_group(group)
        window = self._window()
        if window is None:
            for g in range(group[1] - 1, group[1] - self.ahead - 1, -1):
                self._prefetch_group((group[0], g))
            return
        held = -1  # computed only when a group has something to read
        for g in range(group[1] - 1, group[1] - self.ahead - 1, -1):
            need = self.entries.bytes_to_read((group[0], g))
            if not need:
                continue
            if held < 0:
                held = self.entries.held_offloaded_bytes()
            over = self.budget is not None and self._stats.resident_bytes + need > self.budget
            if held and (held + need > window or over):
                return
            self._prefetch_group((group[0], g))
            held += need

    def _window(self) -> int | None:
        """The read-ahead window in bytes (None: unbounded)."""
        if self.readahead_bytes == "auto":
            return self.entries.largest_group * 3 // 2
        assert self.readahead_bytes is None or isinstance(self.readahead_bytes, int)
        return self.readahead_bytes

    def _prefetch_group(self, group: Group) -> None:
        for e in list(self.entries.offloaded.get(group, {}).values()):
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
        self.store.read(e.key, e.buffer.data_ptr(), e.nbytes)
        timing["submit_ns"] += time.perf_counter_ns() - submitted
        e.state = "reading"

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
                self.read_ahead(group)
            try:
                return self._materialize(e)
            except BaseException:
                self.entries.orphan_pass(group[0])  # this backward is over
                raise

    def _materialize(self, e: Entry) -> tuple[torch.UntypedStorage, int]:
        """The memory holding ``e``'s bytes and the byte offset they start at in it (a
        read-back buffer starts in phase with the store's file), read back if needed."""
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
                self.store.wait(e.key)
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
                self._finish_read(e)
            if e.key:
                self.entries.by_key.pop(e.key, None)
                if self._store is not None and not self._store.closed:
                    # Cheap: the store keeps the file for a later write (no unlink, which
                    # cost 4-10 ms here with its blocks discarded) while its files stay
                    # within the most it held at once.
                    self._store.remove(e.key)
            held = e.storage is not None or (e.buffer is not None and e.device.type == "cpu")
            if held:
                self._stats.add_resident(-e.nbytes)
            read_back = e.buffer is not None
            buffer = e.buffer.untyped_storage() if e.buffer is not None else None
            e.storage = None
            e.buffer = None
            self.host.let_go(buffer, e.device)
            del buffer
            if read_back and not e.orphaned and self._window() is not None and not self.closed:
                self.read_ahead(e.group)  # the window has room again: start the next reads

    # ---- end of a forward, end of the cache -----------------------------------------------------
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
            self.closed = True
            if self._store is not None and not self._store.closed:
                self._closed_store_stats = self._store.stats()
                self._store.close()  # waits for the I/O still reading saved memory
            self.entries.discard()
            self.host.pending.clear()
            self._writing.clear()
            self._unraised.clear()
            self._stats.resident_bytes = 0

    def store_report(self) -> dict[str, Any]:
        """The store's statistics and whether it uses O_DIRECT, for ``stats()`` (the totals at
        close once closed; nothing if it never opened)."""
        if self._store is not None and not self._store.closed:
            return {"store": self._store.stats(), "direct_io": self._store.direct}
        if self._closed_store_stats is not None:  # closed: the totals at close
            direct = self._store.direct if self._store is not None else False
            return {"store": dict(self._closed_store_stats), "direct_io": direct}
        return {}
