"""Thin ctypes binding of the native heterogeneous neighbour sampler (``hector/sampler.h``).

:class:`NeighborSampler` copies a COO graph into the native sampler once; :meth:`~NeighborSampler.
sample` draws a mini-batch and returns it as :class:`SampledArrays`, numpy arrays already in the
layout of ``hector.HeteroGraph`` (local ids grouped by node type, edges sorted by type, degree
normalizers and compaction map). :func:`gather_rows` copies rows of a (memory-mapped) float32
table with several threads; :func:`gather_file_rows` reads rows of a table stored in a file with
``pread`` (sorted by position in the file, neighbouring rows in one read), never mapping the file
into the process. The native calls release the GIL, so sampling and gathering run
alongside Python threads doing compute.

This module depends only on ctypes, numpy and the runtime's own loader: nothing above the
runtime is imported.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import native

__all__ = [
    "ERR_FANOUT",
    "ERR_IO",
    "ERR_NTYPE_RANGE",
    "ERR_SEED_DUPLICATE",
    "ERR_SEED_RANGE",
    "ERR_TOO_LARGE",
    "NeighborSampler",
    "SampledArrays",
    "fanout_table",
    "gather_file_rows",
    "gather_rows",
]

#: Status codes of ``hector/sampler.h``.
ERR_SEED_RANGE = 201
ERR_SEED_DUPLICATE = 202
ERR_FANOUT = 203
ERR_NTYPE_RANGE = 204
ERR_TOO_LARGE = 205
ERR_IO = 206

_I32 = ctypes.c_int32
_I64 = ctypes.c_int64
_P = ctypes.c_void_p
_INT32_MAX = 2**31 - 1


@functools.cache
def _lib() -> ctypes.CDLL:
    """The native library with the sampler's functions declared."""
    lib = native.load_library()
    lib.hector_sampler_abi_version.argtypes = []
    lib.hector_sampler_abi_version.restype = _I32
    lib.hector_sampler_create.argtypes = [_I64, _I64, _I32, _I32, _P, _P, _P, _P, _P, _P]
    lib.hector_sampler_create.restype = _I32
    lib.hector_sampler_free.argtypes = [_P]
    lib.hector_sampler_free.restype = None
    lib.hector_sampler_max_in_degree.argtypes = [_P]
    lib.hector_sampler_max_in_degree.restype = _I64
    lib.hector_sampler_sample.argtypes = [_P, _I64, _P, _I32, _P, ctypes.c_uint64, _I32, _P]
    lib.hector_sampler_sample.argtypes += [_P, _P]
    lib.hector_sampler_sample.restype = _I32
    lib.hector_sampled_batch_write.argtypes = [_P] * 19
    lib.hector_sampled_batch_write.restype = _I32
    lib.hector_sampled_batch_free.argtypes = [_P]
    lib.hector_sampled_batch_free.restype = None
    lib.hector_gather_rows.argtypes = [_P, _I64, _I64, _P, _I64, _P, _I32, _P]
    lib.hector_gather_rows.restype = _I32
    lib.hector_gather_file_rows.argtypes = [_I32, _I64, _I64, _I64, _P, _I64, _P, _I32, _I64, _P]
    lib.hector_gather_file_rows.restype = _I32
    if lib.hector_sampler_abi_version() != 1:
        raise RuntimeError("the native sampler has another ABI version; reinstall Hector")
    return lib


def _ids(name: str, value: Any) -> np.ndarray:
    """``value`` as a contiguous 1-D int64 numpy array (ValueError naming ``name``)."""
    if hasattr(value, "numpy") and hasattr(value, "detach"):  # a torch tensor, without torch
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.dtype.kind not in "iu" and not (array.size == 0 and array.dtype.kind == "f"):
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.dtype.kind == "u" and array.size and int(array.max()) > 2**63 - 1:
        raise ValueError(f"{name} has an entry over the int64 range")
    return np.ascontiguousarray(array, dtype=np.int64)


def _count(name: str, value: Any) -> int:
    """``value`` as an int in ``[0, 2**31 - 1]`` (ValueError naming ``name``)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= int(value) <= _INT32_MAX:
        raise ValueError(f"{name} must be in [0, {_INT32_MAX}], got {int(value)}")
    return int(value)


def fanout_table(fanouts: Any, num_etypes: int) -> np.ndarray:
    """Fan-outs as an int32 ``[hops, num_etypes]`` table.

    Args:
        fanouts: one entry per hop; each entry is an int (the same fan-out for every relation,
            like PyG's ``num_neighbors=[10, 10]``) or a sequence of ``num_etypes`` ints. ``-1``
            takes every neighbour, ``0`` none.
        num_etypes: number of edge types R of the graph.

    Raises:
        ValueError: on an empty list, a per-hop list of the wrong length, or a fan-out < -1.
    """
    if isinstance(fanouts, str | bytes) or not isinstance(fanouts, Sequence | np.ndarray):
        raise ValueError(f"fanouts must be a list with one entry per hop, got {fanouts!r}")
    if len(fanouts) == 0:
        raise ValueError("fanouts must have at least one hop, got []")
    table = np.empty((len(fanouts), num_etypes), dtype=np.int32)
    for hop, entry in enumerate(fanouts):
        if isinstance(entry, int | np.integer) and not isinstance(entry, bool):
            row = [int(entry)] * num_etypes
        elif isinstance(entry, Sequence | np.ndarray) and not isinstance(entry, str):
            row = list(entry)
            if len(row) != num_etypes:
                raise ValueError(
                    f"fanouts[{hop}] has {len(row)} entries but the graph has {num_etypes} "
                    "edge types (give one fan-out per edge type, or one int for all)"
                )
        else:
            raise ValueError(f"fanouts[{hop}] must be an int or a list of ints, got {entry!r}")
        for r, f in enumerate(row):
            if isinstance(f, bool) or not isinstance(f, int | np.integer):
                raise ValueError(f"fanouts[{hop}][{r}] must be an int, got {f!r}")
            if not -1 <= int(f) <= _INT32_MAX:
                raise ValueError(
                    f"fanouts[{hop}][{r}] = {int(f)}; a fan-out is >= 0, or -1 for every neighbour"
                )
        table[hop] = row
    return table


@dataclass
class SampledArrays:
    """A sampled mini-batch in Hector's graph layout (N nodes, E edges, R edge types, T node
    types, B seeds); see ``hector/sampler.h``.

    Attributes:
        node_ids: int64 [N], global id of each local node; local ids are grouped by node type,
            seeds first within their type.
        ntype: int32 [N]; ntype_ptr: int32 [T + 1], local id range of each node type.
        seed_local: int32 [B], local id of each seed in the order given.
        src, dst, etype: int32 [E], local endpoints and type, stably sorted by type.
        etype_ptr: int32 [R + 1].
        norm_dst_etype, norm_dst: float32 [E], 1 / sampled edges of the same (dst, type) and
            1 / sampled in-degree of dst.
        perm: int64 [E], sampling order of each edge; edge_ids: int64 [E], input edge ids.
        compact_src, compact_etype: int32 [C]; edge_compact: int32 [E]: compaction map.
        etype_src_ntype: int32 [R]; src_typed: each relation's sources share one node type.
    """

    node_ids: np.ndarray
    ntype: np.ndarray
    ntype_ptr: np.ndarray
    seed_local: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    etype: np.ndarray
    etype_ptr: np.ndarray
    norm_dst_etype: np.ndarray
    norm_dst: np.ndarray
    perm: np.ndarray
    edge_ids: np.ndarray
    compact_src: np.ndarray
    compact_etype: np.ndarray
    edge_compact: np.ndarray
    etype_src_ntype: np.ndarray
    src_typed: bool


def _ptr(array: np.ndarray) -> int:
    return int(array.ctypes.data)


class NeighborSampler:
    """A native heterogeneous neighbour sampler over one graph (read-only; thread-safe).

    Args:
        src, dst, etype: integer [E] arrays (numpy or torch): edges ``src -> dst`` of type
            ``etype``. Messages flow along edges, so a node samples its *in*-neighbours.
        num_nodes: N; node ids must be in ``[0, N)``.
        num_etypes: R; edge types must be in ``[0, R)``.
        ntype: integer [N] node types (default: all 0).
        num_ntypes: T (default ``ntype.max() + 1``, 1 without ``ntype``).

    Raises:
        ValueError: an id, type or count is out of range, or arrays disagree in length.
        MemoryError: the adjacency does not fit in memory.
    """

    def __init__(
        self,
        src: Any,
        dst: Any,
        etype: Any,
        num_nodes: int,
        num_etypes: int,
        ntype: Any = None,
        num_ntypes: int | None = None,
    ) -> None:
        """Build the native adjacency (see the class docstring)."""
        self._handle: int | None = None
        src64, dst64, et64 = _ids("src", src), _ids("dst", dst), _ids("etype", etype)
        if not len(src64) == len(dst64) == len(et64):
            raise ValueError(
                f"src, dst and etype must have one entry per edge, got {len(src64)}, "
                f"{len(dst64)} and {len(et64)}"
            )
        self.num_nodes = _count("num_nodes", num_nodes)
        self.num_etypes = _count("num_etypes", num_etypes)
        _count("number of edges", len(src64))
        nt64 = None if ntype is None else _ids("ntype", ntype)
        if nt64 is not None and len(nt64) != self.num_nodes:
            raise ValueError(f"ntype has {len(nt64)} entries but num_nodes={self.num_nodes}")
        if num_ntypes is None:
            num_ntypes = int(nt64.max()) + 1 if nt64 is not None and len(nt64) else 1
        self.num_ntypes = _count("num_ntypes", max(int(num_ntypes), 0))
        handle, bad = _P(), _I64(-1)
        code = _lib().hector_sampler_create(
            self.num_nodes,
            len(src64),
            self.num_etypes,
            self.num_ntypes,
            _ptr(src64),
            _ptr(dst64),
            _ptr(et64),
            None if nt64 is None else _ptr(nt64),
            ctypes.byref(bad),
            ctypes.byref(handle),
        )
        i = bad.value
        if code == native.ERR_SRC_RANGE:
            raise ValueError(f"src[{i}] = {src64[i]} is out of range for num_nodes={num_nodes}")
        if code == native.ERR_DST_RANGE:
            raise ValueError(f"dst[{i}] = {dst64[i]} is out of range for num_nodes={num_nodes}")
        if code == native.ERR_ETYPE_RANGE:
            raise ValueError(f"etype[{i}] = {et64[i]} is out of range for num_etypes={num_etypes}")
        if code == ERR_NTYPE_RANGE and nt64 is not None:
            raise ValueError(
                f"ntype[{i}] = {nt64[i]} is out of range for num_ntypes={self.num_ntypes}"
            )
        if code == native.ERR_OUT_OF_MEMORY:
            raise MemoryError("the sampler's adjacency does not fit in memory")
        if code != native.OK:
            raise ValueError(f"hector_sampler_create failed (status {code})")
        self._handle = handle.value
        self.num_edges = len(src64)

    @property
    def max_in_degree(self) -> int:
        """Largest in-degree of a node (all relations together)."""
        return int(_lib().hector_sampler_max_in_degree(self._live()))

    def _live(self) -> int:
        if self._handle is None:
            raise ValueError("this NeighborSampler is closed")
        return self._handle

    def sample(self, seeds: Any, fanouts: Any, *, seed: int = 0, threads: int = 0) -> SampledArrays:
        """Sample a mini-batch around ``seeds`` (see ``hector/sampler.h``).

        Args:
            seeds: distinct global node ids (integer 1-D array or tensor).
            fanouts: one entry per hop: an int for every relation or ``num_etypes`` ints
                (:func:`fanout_table`); ``-1`` takes every neighbour.
            seed: random seed; the batch depends only on it, the graph, ``seeds`` and
                ``fanouts`` — not on ``threads``.
            threads: sampling threads (0: one per hardware thread).

        Raises:
            ValueError: a seed id is out of range or repeated, or a fan-out list is malformed
                (wrong number of entries per hop, a value < -1).
            MemoryError: the batch does not fit in memory.
        """
        seeds64 = _ids("seeds", seeds)
        table = fanout_table(fanouts, self.num_etypes)
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise ValueError(f"seed must be an int, got {seed!r}")
        lib = _lib()
        batch, bad = _P(), _I64(-1)
        sizes = np.zeros(3, dtype=np.int64)
        code = lib.hector_sampler_sample(
            self._live(),
            len(seeds64),
            _ptr(seeds64),
            table.shape[0],
            _ptr(table),
            int(seed) & (2**64 - 1),
            int(threads),
            ctypes.byref(bad),
            _ptr(sizes),
            ctypes.byref(batch),
        )
        i = bad.value
        if code == ERR_SEED_RANGE:
            raise ValueError(
                f"seeds[{i}] = {seeds64[i]} is out of range for a graph of {self.num_nodes} nodes"
            )
        if code == ERR_SEED_DUPLICATE:
            raise ValueError(
                f"seeds[{i}] = {seeds64[i]} appears more than once; seeds must be distinct"
            )
        if code == ERR_FANOUT:
            raise ValueError(f"fan-out #{i} is {table.reshape(-1)[i]} (must be >= -1)")
        if code == ERR_TOO_LARGE:
            raise ValueError(
                "the sampled batch has more than 2**31 - 1 nodes or edges; use smaller "
                "fan-outs or batches"
            )
        if code == native.ERR_OUT_OF_MEMORY:
            raise MemoryError("the sampled batch does not fit in memory")
        if code != native.OK:
            raise ValueError(f"hector_sampler_sample failed (status {code})")
        handle = batch.value
        if handle is None:
            raise ValueError("hector_sampler_sample returned no batch")
        try:
            return self._write(handle, int(sizes[0]), int(sizes[1]), int(sizes[2]))
        finally:
            lib.hector_sampled_batch_free(handle)

    def _write(self, batch: int, n: int, e: int, b: int) -> SampledArrays:
        """Copy a native batch into fresh numpy arrays in Hector's layout."""
        r, t = self.num_etypes, self.num_ntypes
        out = SampledArrays(
            node_ids=np.empty(n, np.int64),
            ntype=np.empty(n, np.int32),
            ntype_ptr=np.empty(t + 1, np.int32),
            seed_local=np.empty(b, np.int32),
            src=np.empty(e, np.int32),
            dst=np.empty(e, np.int32),
            etype=np.empty(e, np.int32),
            etype_ptr=np.empty(r + 1, np.int32),
            norm_dst_etype=np.empty(e, np.float32),
            norm_dst=np.empty(e, np.float32),
            perm=np.empty(e, np.int64),
            edge_ids=np.empty(e, np.int64),
            compact_src=np.empty(e, np.int32),
            compact_etype=np.empty(e, np.int32),
            edge_compact=np.empty(e, np.int32),
            etype_src_ntype=np.empty(r, np.int32),
            src_typed=True,
        )
        num_compact, typed = _I64(0), _I32(1)
        code = _lib().hector_sampled_batch_write(
            batch,
            *(
                _ptr(getattr(out, name))
                for name in (
                    "node_ids ntype ntype_ptr seed_local src dst etype etype_ptr norm_dst_etype "
                    "norm_dst perm edge_ids compact_src compact_etype edge_compact"
                ).split()
            ),
            ctypes.addressof(num_compact),
            _ptr(out.etype_src_ntype),
            ctypes.addressof(typed),
        )
        if code == native.ERR_OUT_OF_MEMORY:
            raise MemoryError("the sampled batch does not fit in memory")
        if code != native.OK:
            raise ValueError(f"hector_sampled_batch_write failed (status {code})")
        c = num_compact.value
        out.compact_src = out.compact_src[:c]
        out.compact_etype = out.compact_etype[:c]
        out.src_typed = bool(typed.value)
        return out

    def close(self) -> None:
        """Free the native adjacency (idempotent)."""
        if self._handle is not None:
            _lib().hector_sampler_free(self._handle)
            self._handle = None

    def __del__(self) -> None:
        """Free the native adjacency."""
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have unloaded ctypes
            pass


def gather_rows(
    table: np.ndarray, index: Any, *, out: np.ndarray | None = None, threads: int = 0
) -> np.ndarray:
    """``table[index]`` for a 2-D float32 row-major table (a ``np.memmap`` reads only the rows
    it needs), copied by ``threads`` native threads (0: one per hardware thread).

    Raises:
        ValueError: a wrong dtype, shape or layout, an ``out`` of the wrong shape, or an index
            out of range (naming its position).
    """
    if not isinstance(table, np.ndarray) or table.dtype != np.float32 or table.ndim != 2:
        raise ValueError("table must be a 2-D float32 numpy array (or np.memmap)")
    if not table.flags.c_contiguous:
        raise ValueError("table must be C-contiguous (row-major)")
    idx = _ids("index", index)
    rows, width = table.shape
    if out is None:
        out = np.empty((len(idx), width), dtype=np.float32)
    elif out.dtype != np.float32 or out.shape != (len(idx), width) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {(len(idx), width)}")
    bad = _I64(-1)
    code = _lib().hector_gather_rows(
        _ptr(table) if table.size else None,
        rows,
        width,
        _ptr(idx),
        len(idx),
        _ptr(out),
        int(threads),
        ctypes.byref(bad),
    )
    if code == ERR_SEED_RANGE:
        i = bad.value
        raise ValueError(f"index[{i}] = {idx[i]} is out of range for a table of {rows} rows")
    if code != native.OK:
        raise ValueError(f"hector_gather_rows failed (status {code})")
    return out


def gather_file_rows(
    fd: int,
    offset: int,
    shape: tuple[int, int],
    index: Any,
    *,
    out: np.ndarray | None = None,
    threads: int = 0,
    max_gap_bytes: int = 65536,
) -> np.ndarray:
    """Rows ``index`` of a row-major float32 table of ``shape`` stored in the open file ``fd``
    from byte ``offset`` (an ``.npy`` file's data), read with ``pread`` by ``threads`` native
    threads (0: one per hardware thread). The file is never mapped: its pages stay in the OS
    page cache and out of this process's resident set. Rows are read in file order; wanted rows
    at most ``max_gap_bytes`` apart share one read, a repeated row is read once. The result does
    not depend on ``threads``.

    Raises:
        ValueError: a bad ``fd``/``shape``/``offset``/``out``, or an index out of range (naming its
            position).
        OSError: a read failed or the file is shorter than ``offset`` + the table.
    """
    if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
        raise ValueError(f"fd must be an open file descriptor (an int >= 0), got {fd!r}")
    rows, width = (int(v) for v in shape)
    if rows < 0 or width < 0 or offset < 0 or max_gap_bytes < 0:
        raise ValueError(
            f"shape {shape}, offset {offset} and max_gap_bytes {max_gap_bytes} must be >= 0"
        )
    idx = _ids("index", index)
    if out is None:
        out = np.empty((len(idx), width), dtype=np.float32)
    elif out.dtype != np.float32 or out.shape != (len(idx), width) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {(len(idx), width)}")
    bad = _I64(-1)
    code = _lib().hector_gather_file_rows(
        int(fd),
        int(offset),
        rows,
        width,
        _ptr(idx),
        len(idx),
        _ptr(out),
        int(threads),
        int(max_gap_bytes),
        ctypes.byref(bad),
    )
    if code == ERR_SEED_RANGE:
        i = bad.value
        raise ValueError(f"index[{i}] = {idx[i]} is out of range for a table of {rows} rows")
    if code == ERR_IO:
        err = bad.value
        if err == 0:
            raise OSError(f"the file ends before the {rows} x {width} table at offset {offset}")
        raise OSError(err, f"reading table rows failed: {os.strerror(err)}")
    if code != native.OK:
        raise ValueError(f"hector_gather_file_rows failed (status {code})")
    return out
