"""The tensor cache's store: one per cache, opened on first use, closed once.

:class:`LazyStore` opens the cache's :class:`~hector.runtime.offload.TensorStore` (``root``,
``threads``, ``chunk_bytes``, ``direct``) when the first write needs it, keeping files for the
next write of a size; once closed (by the cache, deleting its files) it never reopens, and it
keeps the store's statistics of that moment for ``stats()``. A store closed directly (not
through the cache) is refused too.
"""

from __future__ import annotations

import functools
from typing import Any

from hector.runtime.offload import TensorStore

from .errors import CLOSED_HINT, OffloadError

__all__ = ["LazyStore"]


class LazyStore:
    """The store of one cache, opened lazily and never reopened once closed.

    Args:
        root, threads, chunk_bytes, direct: passed to :class:`TensorStore`.
    """

    def __init__(self, root: str | None, threads: int, chunk_bytes: int, direct: bool) -> None:
        self._open = functools.partial(
            TensorStore,
            root=root,
            threads=threads,
            chunk_bytes=chunk_bytes,
            direct=direct,
            keep_files=True,  # training writes the same sizes every step: overwrite, not create
        )
        self._store: TensorStore | None = None
        #: True once :meth:`close` ran: the cache is closed.
        self.closed = False
        self._closed_stats: dict[str, Any] | None = None

    def get(self) -> TensorStore:
        """The store (opened on first use, never reopened once closed).

        Raises:
            OffloadError: the cache (or its store) was closed.
        """
        self.check_open()
        if self._store is None:
            self._store = self._open()
        elif self._store.closed:
            raise OffloadError(
                f"the offload store {self._store.path} was closed directly; {CLOSED_HINT}"
            )
        return self._store

    @property
    def opened(self) -> TensorStore | None:
        """The store if it was opened and is not closed (None: no I/O to wait for or poll;
        a store closed directly waited for its I/O as it closed)."""
        store = self._store
        return store if store is not None and not store.closed else None

    def check_open(self) -> None:
        """Raise :class:`OffloadError` if the cache was closed."""
        if self.closed:
            raise OffloadError(f"this offload cache is closed; {CLOSED_HINT}")

    def close(self) -> None:
        """Close the store (waiting for the I/O still reading saved memory, deleting its
        files), keeping its statistics; the cache is closed from now on."""
        self.closed = True
        store = self.opened
        if store is not None:
            self._closed_stats = store.stats()
            store.close()

    def report(self) -> dict[str, Any]:
        """The store's statistics and whether it uses O_DIRECT, for ``stats()`` (the totals at
        close once closed; nothing if it never opened)."""
        store = self.opened
        if store is not None:
            return {"store": store.stats(), "direct_io": store.direct}
        if self._closed_stats is not None:  # closed: the totals at close
            direct = self._store.direct if self._store is not None else False
            return {"store": dict(self._closed_stats), "direct_io": direct}
        return {}
