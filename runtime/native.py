"""Thin ctypes binding of Hector's native runtime library (``libhector_runtime.so``).

Each wrapper takes numpy arrays, checks their dtype, shape and contiguity, calls the C function
and turns its status code into a Python result or exception. The library is located lazily, on
first use, by searching ``lib/`` under every directory of this package's ``__path__`` (an
editable install splits the package between the source tree and site-packages).

This module depends only on ctypes and numpy: nothing above the runtime is imported.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import numpy as np

from . import __path__ as _package_path

__all__ = [
    "ABI_VERSION",
    "ERR_DST_RANGE",
    "ERR_ETYPE_RANGE",
    "ERR_INVALID_ARGUMENT",
    "ERR_OUT_OF_MEMORY",
    "ERR_SRC_RANGE",
    "LIBRARY_NAME",
    "OK",
    "abi_version",
    "graph_compact",
    "graph_degree_norm",
    "graph_sort_by_etype",
    "graph_validate",
    "library_path",
    "load_library",
]

#: ABI version this binding was written against (``hector_runtime_abi_version()``).
ABI_VERSION = 1

#: Status codes, mirroring ``HECTOR_OK`` / ``HECTOR_ERR_*`` in ``hector_runtime.h``.
OK = 0
ERR_SRC_RANGE = 1
ERR_DST_RANGE = 2
ERR_ETYPE_RANGE = 3
ERR_INVALID_ARGUMENT = 4
ERR_OUT_OF_MEMORY = 5

_STATUS_NAMES = {
    OK: "ok",
    ERR_SRC_RANGE: "source node id out of range",
    ERR_DST_RANGE: "destination node id out of range",
    ERR_ETYPE_RANGE: "edge type out of range",
    ERR_INVALID_ARGUMENT: "invalid argument",
    ERR_OUT_OF_MEMORY: "out of memory",
}

LIBRARY_NAME = "libhector_runtime.dylib" if sys.platform == "darwin" else "libhector_runtime.so"

_I32 = ctypes.c_int32
_I64 = ctypes.c_int64
_P = ctypes.c_void_p
_INT32_MAX = 2**31 - 1


def _search_dirs() -> list[str]:
    """Return the directories searched for the library, in order, without duplicates."""
    dirs: list[str] = []
    for base in [*_package_path, os.path.dirname(os.path.abspath(__file__))]:
        candidate = os.path.join(os.path.abspath(base), "lib")
        if candidate not in dirs:
            dirs.append(candidate)
    return dirs


def library_path() -> str:
    """Return the path of ``libhector_runtime.so``.

    ``$HECTOR_RUNTIME_LIBRARY``, when set, names the library file directly; otherwise the
    ``lib/`` folder under each entry of ``hector.runtime.__path__`` is searched.

    Raises:
        RuntimeError: if the library cannot be found.
    """
    override = os.environ.get("HECTOR_RUNTIME_LIBRARY")
    if override:
        if not os.path.isfile(override):
            raise RuntimeError(
                f"HECTOR_RUNTIME_LIBRARY={override!r} does not name an existing file"
            )
        return override
    dirs = _search_dirs()
    for directory in dirs:
        candidate = os.path.join(directory, LIBRARY_NAME)
        if os.path.isfile(candidate):
            return candidate
    raise RuntimeError(
        f"Hector's native runtime library was not found ({LIBRARY_NAME} is in none of: "
        f"{', '.join(dirs)}); reinstall with pip install -e ."
    )


def _declare(lib: ctypes.CDLL) -> None:
    """Declare argument and result types of every bound C function."""
    lib.hector_runtime_abi_version.argtypes = []
    lib.hector_runtime_abi_version.restype = _I32
    lib.hector_graph_validate.argtypes = [_I64, _I64, _I32, _P, _P, _P, _P]
    lib.hector_graph_validate.restype = _I32
    lib.hector_graph_sort_by_etype.argtypes = [_I64, _I32, _P, _P, _P]
    lib.hector_graph_sort_by_etype.restype = _I32
    lib.hector_graph_degree_norm.argtypes = [_I64, _I64, _I32, _P, _P, _P, _P]
    lib.hector_graph_degree_norm.restype = _I32
    lib.hector_graph_compact.argtypes = [_I64, _I64, _I32, _P, _P, _P, _P, _P, _P]
    lib.hector_graph_compact.restype = _I32


@functools.cache
def load_library() -> ctypes.CDLL:
    """Load the native library once and return it, with its functions declared.

    Raises:
        RuntimeError: if the library is missing, cannot be loaded, or has another ABI version.
    """
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise RuntimeError(
            f"Hector's native runtime library at {path} could not be loaded ({exc}); "
            "reinstall with pip install -e ."
        ) from exc
    _declare(lib)
    version = lib.hector_runtime_abi_version()
    if version != ABI_VERSION:
        raise RuntimeError(
            f"Hector's native runtime library at {path} has ABI version {version}, expected "
            f"{ABI_VERSION}; reinstall with pip install -e ."
        )
    return lib


def abi_version() -> int:
    """Return the ABI version reported by the loaded native library."""
    return int(load_library().hector_runtime_abi_version())


def _check_array(name: str, array: object, dtype: type[np.generic]) -> np.ndarray:
    """Check that ``array`` is a 1-D C-contiguous numpy array of ``dtype`` and return it."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(array).__name__}")
    if array.dtype != np.dtype(dtype):
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, got {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return array


def _check_count(name: str, value: int, upper: int | None = None) -> int:
    """Check that ``value`` is a non-negative integer (at most ``upper``) and return it."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if upper is not None and value > upper:
        raise ValueError(f"{name} must be <= {upper}, got {value}")
    return value


def _check_same_length(**arrays: np.ndarray) -> int:
    """Check that all given arrays have the same length and return it."""
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ValueError(f"arrays must have the same length: {shown}")
    return next(iter(lengths.values()))


def _ptr(array: np.ndarray | None) -> int | None:
    """Return the data pointer of ``array`` (None for None)."""
    return None if array is None else array.ctypes.data


def _raise_status(function: str, code: int) -> None:
    """Raise the exception matching a non-OK status code returned by ``function``."""
    message = f"{function} failed: {_STATUS_NAMES.get(code, 'unknown status')} (status {code})"
    if code == ERR_OUT_OF_MEMORY:
        raise MemoryError(message)
    raise ValueError(message)


def graph_validate(
    src: np.ndarray,
    dst: np.ndarray,
    etype: np.ndarray | None,
    num_nodes: int,
    num_etypes: int,
) -> tuple[int, int]:
    """Check that every edge's endpoints and type are in range (``hector_graph_validate``).

    Args:
        src: int64 [E] source node ids.
        dst: int64 [E] destination node ids.
        etype: int64 [E] edge types, or None to skip the edge-type check.
        num_nodes: node ids must lie in ``[0, num_nodes)``.
        num_etypes: edge types must lie in ``[0, num_etypes)``.

    Returns:
        ``(code, bad_index)``: ``(OK, -1)`` when every edge is valid, else the code of the first
        failed check (``ERR_SRC_RANGE``, ``ERR_DST_RANGE`` or ``ERR_ETYPE_RANGE``; src is checked
        before dst before etype) and the index of the first offending edge.
    """
    src = _check_array("src", src, np.int64)
    dst = _check_array("dst", dst, np.int64)
    if etype is not None:
        etype = _check_array("etype", etype, np.int64)
        num_edges = _check_same_length(src=src, dst=dst, etype=etype)
    else:
        num_edges = _check_same_length(src=src, dst=dst)
    num_nodes = _check_count("num_nodes", num_nodes)
    num_etypes = _check_count("num_etypes", num_etypes, _INT32_MAX)
    bad = ctypes.c_int64(-1)
    code = load_library().hector_graph_validate(
        num_edges, num_nodes, num_etypes, _ptr(src), _ptr(dst), _ptr(etype), ctypes.byref(bad)
    )
    if code not in (OK, ERR_SRC_RANGE, ERR_DST_RANGE, ERR_ETYPE_RANGE):
        _raise_status("hector_graph_validate", code)
    return int(code), int(bad.value)


def graph_sort_by_etype(etype: np.ndarray, num_etypes: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable counting sort of edges by type (``hector_graph_sort_by_etype``).

    Args:
        etype: int64 [E] edge types in ``[0, num_etypes)``.
        num_etypes: number of edge types R.

    Returns:
        ``(perm, etype_ptr)``: int64 [E] original edge id at each sorted position (ties keep
        their original order), and int64 [R + 1] offsets of each type's edges in sorted order.

    Raises:
        ValueError: if an edge type is out of range.
    """
    etype = _check_array("etype", etype, np.int64)
    num_etypes = _check_count("num_etypes", num_etypes, _INT32_MAX)
    perm = np.empty(len(etype), dtype=np.int64)
    etype_ptr = np.empty(num_etypes + 1, dtype=np.int64)
    code = load_library().hector_graph_sort_by_etype(
        len(etype), num_etypes, _ptr(etype), _ptr(perm), _ptr(etype_ptr)
    )
    if code != OK:
        _raise_status("hector_graph_sort_by_etype", code)
    return perm, etype_ptr


def graph_degree_norm(
    dst: np.ndarray, etype: np.ndarray, num_nodes: int, num_etypes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-edge degree normalizers (``hector_graph_degree_norm``).

    Args:
        dst: int32 [E] destination node ids in ``[0, num_nodes)``.
        etype: int32 [E] edge types in ``[0, num_etypes)``.
        num_nodes: number of nodes N.
        num_etypes: number of edge types R.

    Returns:
        ``(norm_dst_etype, norm_dst)``, both float32 [E]: ``1 / #edges with the same
        (dst, etype)`` (RGCN's per-relation mean, 1/c_{i,r}) and ``1 / in-degree(dst)``.

    Raises:
        ValueError: if a node id or edge type is out of range.
    """
    dst = _check_array("dst", dst, np.int32)
    etype = _check_array("etype", etype, np.int32)
    num_edges = _check_same_length(dst=dst, etype=etype)
    num_nodes = _check_count("num_nodes", num_nodes)
    num_etypes = _check_count("num_etypes", num_etypes, _INT32_MAX)
    norm_dst_etype = np.empty(num_edges, dtype=np.float32)
    norm_dst = np.empty(num_edges, dtype=np.float32)
    code = load_library().hector_graph_degree_norm(
        num_edges,
        num_nodes,
        num_etypes,
        _ptr(dst),
        _ptr(etype),
        _ptr(norm_dst_etype),
        _ptr(norm_dst),
    )
    if code != OK:
        _raise_status("hector_graph_degree_norm", code)
    return norm_dst_etype, norm_dst


def graph_compact(
    src: np.ndarray, etype: np.ndarray, num_nodes: int, num_etypes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compaction map (``hector_graph_compact``) of edges sorted by type.

    Returns:
        ``(compact_src, compact_etype, edge_compact)``, int32: the source node and edge type of
        each unique (source, edge type) pair, grouped by type, and each edge's row among them.

    Raises:
        ValueError: if an id or type is out of range or edge types are not sorted.
    """
    src = _check_array("src", src, np.int32)
    etype = _check_array("etype", etype, np.int32)
    num_edges = _check_same_length(src=src, etype=etype)
    num_nodes = _check_count("num_nodes", num_nodes)
    num_etypes = _check_count("num_etypes", num_etypes, _INT32_MAX)
    compact_src = np.empty(num_edges, dtype=np.int32)
    compact_etype = np.empty(num_edges, dtype=np.int32)
    edge_compact = np.empty(num_edges, dtype=np.int32)
    count = ctypes.c_int64(0)
    code = load_library().hector_graph_compact(
        num_edges,
        num_nodes,
        num_etypes,
        _ptr(src),
        _ptr(etype),
        _ptr(compact_src),
        _ptr(compact_etype),
        _ptr(edge_compact),
        ctypes.byref(count),
    )
    if code != OK:
        _raise_status("hector_graph_compact", code)
    c = count.value
    return compact_src[:c].copy(), compact_etype[:c].copy(), edge_compact
