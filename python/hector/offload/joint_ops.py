"""The runtime calls a planned joint graph makes: ``hector::offload_put`` / ``_prefetch`` /
``_get``, custom ops opaque to Inductor.

A saved value the plan offloads leaves the forward graph as a *handle* (a one-element int64
CPU tensor numbering a ticket) instead of itself:

* ``offload_put(x, target) -> handle`` runs right after ``x`` is produced. On CPU it starts an
  asynchronous write of ``x``'s bytes to the SSD store (``target = "ssd"``; the store holds
  ``x`` until the write is done, then lets go of it); on CUDA it starts a copy into pinned host
  memory on a side stream (``target = "pinned_host"``).
* ``offload_wait(handle, x, after) -> handle`` runs where the next offloaded value is
  produced (or as the forward ends): it waits until the write (or copy) of ``x`` is done with
  it. ``x`` is its operand so that the compiled graph keeps ``x``'s buffer until then
  (Inductor reuses a buffer after its last use in the graph, whoever else holds the tensor);
  ``after`` (that next value, or the forward's last) so that the compiled graph cannot run
  the wait right after the put (Inductor's scheduler would: nothing else orders it), which
  would leave no compute for the write to overlap; the forward returns this handle.
* ``offload_prefetch(handle) -> handle`` starts reading the value back (into a new tensor)
  ahead of the backward node that needs it.
* ``offload_get(handle, size, stride, dtype, device) -> Tensor`` waits for that read (or reads
  now, if nothing was prefetched) and returns the value; its ticket and stored file are gone.

The fake implementations give each op's result shape, dtype and device, so AOTAutograd and
Inductor compile around them; Inductor calls them as extern kernels. Tickets live in one
process-wide :class:`JointTickets` (its store opened on the first CPU write); a forward whose
backward never runs leaves its tickets until :func:`tickets` ``.clear()`` (or process exit).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from hector.runtime.offload import TensorStore

from . import memory_timeline

__all__ = [
    "JointTickets",
    "Ticket",
    "offload_get",
    "offload_prefetch",
    "offload_put",
    "offload_wait",
    "tickets",
]

TARGETS = ("ssd", "pinned_host")


@dataclass
class Ticket:
    """One offloaded value: where it went and what is in flight for it.

    Attributes:
        nbytes: its size.
        source: the value itself while its write (or copy) may still read it.
        key: its store object (CPU ``ssd``), or None.
        host: its pinned host copy (CUDA ``pinned_host``), or None.
        copied: the CUDA event recorded after the device-to-host copy.
        back: the tensor it is being read back into, once prefetched.
        arrived: the CUDA event recorded after the host-to-device copy.
    """

    nbytes: int
    source: torch.Tensor | None = None
    key: int | None = None
    host: torch.Tensor | None = None
    copied: Any = None
    back: torch.Tensor | None = None
    arrived: Any = None


class JointTickets:
    """The process's offloaded saved values, by ticket number, and the store they go to.

    Args:
        root: the store's root directory (None: the default offload root).
    """

    def __init__(self, root: str | None = None) -> None:
        self._root = root
        self._store: TensorStore | None = None
        self._tickets: dict[int, Ticket] = {}
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._stream: Any = None
        #: Bytes handed to ``offload_put`` / returned by ``offload_get`` so far.
        self.put_bytes = 0
        self.got_bytes = 0
        #: Seconds the compiled graphs spent blocked on the store so far: ``offload_wait``
        #: waiting for writes, ``offload_get`` waiting for reads (or writes it had to finish).
        self.write_wait_s = 0.0
        self.read_wait_s = 0.0

    @property
    def store(self) -> TensorStore:
        """The SSD store (opened on first use, kept files reused between steps)."""
        if self._store is None or self._store.closed:
            self._store = TensorStore(self._root, keep_files=True)
        return self._store

    def stats(self) -> dict[str, Any]:
        """Bytes put and got, tickets outstanding, and the store's statistics if it opened."""
        out: dict[str, Any] = {
            "put_bytes": self.put_bytes,
            "got_bytes": self.got_bytes,
            "outstanding": len(self._tickets),
            "write_wait_s": self.write_wait_s,
            "read_wait_s": self.read_wait_s,
        }
        if self._store is not None and not self._store.closed:
            out["store"] = self._store.stats()
        return out

    def clear(self) -> None:
        """Forget every outstanding ticket (their backward will not run) and close the store."""
        with self._lock:
            self._tickets.clear()
        if self._store is not None:
            self._store.close()
            self._store = None

    def _side_stream(self) -> Any:
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        return self._stream

    def put(self, x: torch.Tensor, target: str) -> int:
        """Start offloading ``x``; return its ticket number."""
        if target not in TARGETS:
            raise ValueError(f"offload target must be one of {TARGETS}, got {target!r}")
        x = x if dense(x) else x.contiguous()
        ticket = Ticket(x.numel() * x.element_size(), source=x)
        if x.is_cuda:
            ticket.host = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, pin_memory=True)
            stream = self._side_stream()
            stream.wait_stream(torch.cuda.current_stream(x.device))
            with torch.cuda.stream(stream):
                ticket.host.copy_(x, non_blocking=True)
                ticket.copied = torch.cuda.Event()
                ticket.copied.record(stream)
            x.record_stream(stream)
            ticket.source = None  # the allocator keeps x until the copy is done
        elif target == "pinned_host":
            raise ValueError("a CPU tensor has no pinned host tier: offload it to 'ssd'")
        elif ticket.nbytes:
            ticket.key = self.store.write(x.data_ptr(), ticket.nbytes)
        with self._lock:
            number = next(self._numbers)
            self._tickets[number] = ticket
        self.put_bytes += ticket.nbytes
        return number

    def written(self, number: int) -> None:
        """Wait until ticket ``number``'s write (CPU) or copy (CUDA, on the current stream)
        no longer reads its source, and let go of the source."""
        ticket = self._tickets[number]
        if ticket.copied is not None:
            torch.cuda.current_stream().wait_event(ticket.copied)
        elif ticket.key is not None:
            start = time.perf_counter()
            self.store.wait(ticket.key)
            self.write_wait_s += time.perf_counter() - start
        ticket.source = None

    def prefetch(self, number: int, size: list[int], stride: list[int], dtype: torch.dtype) -> None:
        """Start reading ticket ``number`` (a value of ``size``, ``stride``, ``dtype``) back;
        a no-op if already started or never written."""
        ticket = self._tickets[number]
        if ticket.back is not None or ticket.source is not None and ticket.key is None:
            return
        if ticket.host is not None:
            device = torch.device("cuda", torch.cuda.current_device())
            stream = self._side_stream()
            with torch.cuda.stream(stream):
                stream.wait_event(ticket.copied)
                ticket.back = torch.empty_strided(size, stride, dtype=dtype, device=device)
                ticket.back.copy_(ticket.host, non_blocking=True)
                ticket.arrived = torch.cuda.Event()
                ticket.arrived.record(stream)
            return
        if ticket.key is None:
            return
        if ticket.source is not None:  # still being written: served from memory
            return
        ticket.back = torch.empty_strided(size, stride, dtype=dtype)
        self.store.read(ticket.key, ticket.back.data_ptr(), ticket.nbytes)

    def get(
        self, number: int, size: list[int], stride: list[int], dtype: torch.dtype
    ) -> torch.Tensor:
        """The value of ticket ``number`` (``size``, ``stride``, ``dtype``); the ticket ends."""
        self.prefetch(number, size, stride, dtype)
        with self._lock:
            ticket = self._tickets.pop(number)
        self.got_bytes += ticket.nbytes
        if ticket.host is not None:
            assert ticket.back is not None
            torch.cuda.current_stream().wait_event(ticket.arrived)
            ticket.back.record_stream(torch.cuda.current_stream())
            return ticket.back
        if ticket.key is None:  # nothing written (no bytes)
            if ticket.source is not None:
                return ticket.source
            return torch.empty_strided(size, stride, dtype=dtype)
        store, start = self.store, time.perf_counter()
        try:
            if ticket.back is None:  # the write was still running at prefetch: use the source
                store.remove(ticket.key)  # waits for the write, keeps the file for the next
                assert ticket.source is not None
                return ticket.source
            store.wait(ticket.key)
            store.remove(ticket.key)
            return ticket.back
        finally:
            self.read_wait_s += time.perf_counter() - start


_TICKETS = JointTickets()


def tickets() -> JointTickets:
    """The process's :class:`JointTickets` (statistics; ``clear()``)."""
    return _TICKETS


def dense(x: torch.Tensor) -> bool:
    """Whether ``x``'s elements fill ``numel * itemsize`` bytes from its data pointer on (no
    gaps, no overlap, no negative stride): a permuted view of a contiguous tensor is; its
    bytes are written and read back as they lie, into a tensor of the same strides."""
    expected = 1
    for size, stride in sorted(zip(x.shape, x.stride(), strict=True), key=lambda d: d[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def _handle(number: int) -> torch.Tensor:
    return torch.tensor([number], dtype=torch.int64)


@torch.library.custom_op("hector::offload_put", mutates_args=())
def offload_put(x: torch.Tensor, target: str) -> torch.Tensor:
    """Start offloading saved value ``x`` to ``target``; return its handle."""
    number = _TICKETS.put(x, target)
    memory_timeline.note(f"put {number}")
    return _handle(number)


@offload_put.register_fake
def _put_fake(x: torch.Tensor, target: str) -> torch.Tensor:
    return torch.empty(1, dtype=torch.int64, device="cpu")


@torch.library.custom_op("hector::offload_wait", mutates_args=())
def offload_wait(
    handle: torch.Tensor, x: torch.Tensor, after: torch.Tensor | None = None
) -> torch.Tensor:
    """Wait until the write of ``handle``'s value ``x`` no longer reads it (``x`` is an operand
    so that the compiled graph keeps its buffer until here; ``after``, a value computed where
    the wait belongs, so that it cannot run earlier, right after the put); return a handle
    for backward."""
    _TICKETS.written(int(handle[0]))
    memory_timeline.note(f"wait {int(handle[0])}")
    return handle.clone()


@offload_wait.register_fake
def _wait_fake(
    handle: torch.Tensor, x: torch.Tensor, after: torch.Tensor | None = None
) -> torch.Tensor:
    return torch.empty_like(handle)


@torch.library.custom_op("hector::offload_prefetch", mutates_args=())
def offload_prefetch(
    handle: torch.Tensor,
    size: list[int],
    stride: list[int],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """Start reading the value of ``handle`` back; return a handle for ``offload_get``."""
    memory_timeline.note(f"before prefetch {int(handle[0])}")
    _TICKETS.prefetch(int(handle[0]), size, stride, dtype)
    return handle.clone()


@offload_prefetch.register_fake
def _prefetch_fake(
    handle: torch.Tensor,
    size: list[int],
    stride: list[int],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    return torch.empty_like(handle)


@torch.library.custom_op("hector::offload_get", mutates_args=())
def offload_get(
    handle: torch.Tensor,
    size: list[int],
    stride: list[int],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """The value of ``handle`` (``size``, ``stride``, ``dtype``, on ``device``)."""
    memory_timeline.note(f"before get {int(handle[0])}")
    return _TICKETS.get(int(handle[0]), size, stride, dtype)


@offload_get.register_fake
def _get_fake(
    handle: torch.Tensor,
    size: list[int],
    stride: list[int],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, device=device)


@torch.library.custom_op("hector::offload_realize", mutates_args=("x",))
def offload_realize(x: torch.Tensor) -> None:
    """Nothing at run time. Declared to mutate ``x``, so the compiled graph materializes
    ``x`` where this call stands and every later reader reads that buffer: Inductor cannot
    compute ``x`` again inside a later kernel from its operands, which would keep those
    operands (values read back from the store among them) alive until that kernel
    (:func:`~.joint_liveness.realize_points`)."""


@offload_realize.register_fake
def _realize_fake(x: torch.Tensor) -> None:
    return None
