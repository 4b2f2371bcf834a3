"""On-disk cache of generated arrays for ``hector bench minibatch`` and ``feature-gather``.

Generated graphs, feature tables and labels are written once as ``.npy`` files and memory-mapped
afterwards. The cache lives in a directory private to the current user
(:mod:`hector.runtime.private_dir`): ``$HECTOR_CACHE_DIR/minibatch`` or
``~/.cache/hector/minibatch`` by default; a directory the user names (``--cache-dir``) must be
private too (created ``0700`` when missing), or it is refused. A shared, predictable place such as
``/tmp/hector-minibatch-cache`` let anyone plant a symbolic link there (the benchmark wrote
through it) or plant the arrays the benchmark read.

Every file is created under a fresh temporary name with ``O_EXCL | O_NOFOLLOW`` relative to the
directory's descriptor and then renamed into place, so a link planted at the final name is
replaced, never written through. A *group* of arrays (a graph, a feature table, labels) is
described by a manifest, ``<group>.manifest.json``, written last: each file's size, dtype,
shape and content hash (xxh3-128 where the ``xxhash`` module is installed, else BLAKE2b). A read
opens every file with ``O_NOFOLLOW``, checks it against the manifest and maps the very file it
checked; a missing, partial or altered group is regenerated with a warning, never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np

from hector.runtime.private_dir import (
    UnsafeDirectoryError,
    open_private_file,
    private_dir,
    rename_in,
    unlink_in,
    user_cache_dir,
    write_private_file,
)

__all__ = [
    "CacheIntegrityWarning",
    "UnsafeDirectoryError",
    "cache_root",
    "load_group",
    "subdir",
    "write_group",
]

MANIFEST_VERSION = 1
_CHUNK = 8 << 20


class CacheIntegrityWarning(UserWarning):
    """A cached group did not match its manifest (or had none) and is regenerated."""


class _Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> None: ...

    def hexdigest(self) -> str: ...


def _hasher(algorithm: str) -> _Hasher:
    """A fresh hash object of ``algorithm`` (``xxh3_128`` or ``blake2b``)."""
    if algorithm == "xxh3_128":
        import xxhash

        return xxhash.xxh3_128()
    if algorithm == "blake2b":
        return hashlib.blake2b(digest_size=32)
    raise ValueError(f"unknown hash algorithm {algorithm!r}")


def _default_algorithm() -> str:
    try:
        import xxhash  # noqa: F401
    except ImportError:
        return "blake2b"
    return "xxh3_128"


def cache_root(cache_dir: str | os.PathLike[str] | None, name: str = "minibatch") -> Path:
    """The cache directory: ``cache_dir`` checked (created ``0700`` when missing) as private to
    the current user, or by default :func:`~hector.runtime.private_dir.user_cache_dir` of
    ``name``. Raises :class:`UnsafeDirectoryError` (an ``OSError``) for a directory that is a
    link, not a directory, someone else's, or writable by others."""
    if cache_dir is None:
        return user_cache_dir(name)
    try:
        return private_dir(cache_dir)
    except FileNotFoundError:
        raise UnsafeDirectoryError(
            f"cannot create the cache directory '{os.fspath(cache_dir)}': its parent does not exist"
        ) from None


def subdir(root: Path, name: str) -> Path:
    """The private subdirectory ``name`` (a plain name) of the private ``root``."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not a plain directory name: {name!r}")
    private_dir(root)
    return private_dir(root / name)


class _HashingWriter:
    """A write-only file object that hashes what passes through it and counts the bytes (so
    ``np.save`` writes through Python, not ``tofile`` on a descriptor)."""

    def __init__(self, raw: IO[bytes], algorithm: str) -> None:
        self.raw = raw
        self.hash = _hasher(algorithm)
        self.size = 0

    def write(self, data: bytes | memoryview) -> int:
        view = memoryview(data).cast("B")
        self.hash.update(view)
        self.size += len(view)
        return self.raw.write(view)

    def flush(self) -> None:
        self.raw.flush()


def _tmp_name(name: str) -> str:
    return f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"


#: What a producer writes: ``producer(write)`` calls ``write(bytes)`` with the whole ``.npy``
#: file's bytes in order (a header first), and returns ``(dtype, shape)`` of the array.
Producer = Callable[[Callable[[Any], object]], tuple[np.dtype[Any], tuple[int, ...]]]


def array_producer(array: np.ndarray) -> Producer:
    """A producer that writes ``array`` as an ``.npy`` file."""

    def produce(write: Callable[[Any], object]) -> tuple[np.dtype[Any], tuple[int, ...]]:
        sink = _Sink(write)
        np.save(sink, np.ascontiguousarray(array), allow_pickle=False)
        return array.dtype, tuple(int(n) for n in array.shape)

    return produce


class _Sink:
    """A file-like object ``np.save`` writes to, forwarding to ``write``."""

    def __init__(self, write: Callable[[Any], object]) -> None:
        self.write = write

    def flush(self) -> None:
        pass


def chunked_producer(
    dtype: np.dtype[Any] | type, shape: tuple[int, ...], chunks: Iterator[np.ndarray]
) -> Producer:
    """A producer that writes an ``.npy`` header for ``dtype``/``shape`` and then ``chunks`` (C
    order, together exactly ``shape``), so a large table never sits in memory whole."""
    dt = np.dtype(dtype)

    def produce(write: Callable[[Any], object]) -> tuple[np.dtype[Any], tuple[int, ...]]:
        header = {"descr": np.lib.format.dtype_to_descr(dt), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(_Sink(write), header)
        expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        written = 0
        for chunk in chunks:
            data = np.ascontiguousarray(chunk, dtype=dt)
            write(data.data.cast("B"))
            written += data.nbytes
        if written != expected:
            raise ValueError(f"chunks hold {written} bytes, the shape {shape} needs {expected}")
        return dt, shape

    return produce


def write_group(
    directory: Path, group: str, files: dict[str, Producer], extra: dict[str, Any] | None = None
) -> None:
    """Write each of ``files`` (name → producer) in the private ``directory`` (fresh temporary
    name with ``O_EXCL | O_NOFOLLOW``, then renamed), then the group's manifest
    (``<group>.manifest.json``, atomically, last) with every file's size, dtype, shape and
    hash, and ``extra`` (JSON) data."""
    algorithm = _default_algorithm()
    entries: dict[str, Any] = {}
    # The old manifest goes first: a reader never pairs it with a half-replaced group.
    unlink_in(directory, f"{group}.manifest.json")
    for name, produce in files.items():
        tmp = _tmp_name(name)
        fd = open_private_file(directory, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            with os.fdopen(fd, "wb", closefd=True) as raw:
                writer = _HashingWriter(raw, algorithm)
                dtype, shape = produce(writer.write)
                raw.flush()
                os.fsync(raw.fileno())
            rename_in(directory, tmp, name)
        except BaseException:
            unlink_in(directory, tmp)
            raise
        entries[name] = {
            "size": writer.size,
            "dtype": np.lib.format.dtype_to_descr(np.dtype(dtype)),
            "shape": list(shape),
            "hash": writer.hash.hexdigest(),
        }
    manifest = {
        "version": MANIFEST_VERSION,
        "hash_algorithm": algorithm,
        "files": entries,
        "extra": extra or {},
    }
    write_private_file(directory, f"{group}.manifest.json", json.dumps(manifest).encode())


def _read_private(directory: Path, name: str) -> IO[bytes]:
    """``name`` in the private ``directory``, opened for reading with ``O_NOFOLLOW``."""
    fd = open_private_file(directory, name, os.O_RDONLY)
    return os.fdopen(fd, "rb", closefd=True)


def _check_file(f: IO[bytes], entry: dict[str, Any], algorithm: str) -> np.memmap[Any, Any]:
    """Check the open ``.npy`` file ``f`` against its manifest ``entry`` (size, header's dtype
    and shape, hash of every byte) and map it read-only; ValueError on any mismatch."""
    size = os.fstat(f.fileno()).st_size
    if size != entry["size"]:
        raise ValueError(f"size {size}, manifest says {entry['size']}")
    h = _hasher(algorithm)
    while chunk := f.read(_CHUNK):
        h.update(chunk)
    if h.hexdigest() != entry["hash"]:
        raise ValueError("content hash differs from the manifest's")
    f.seek(0)
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise ValueError(f"unsupported .npy version {version}")
    if fortran or np.lib.format.dtype_to_descr(dtype) != entry["dtype"]:
        raise ValueError(f"dtype {dtype}, manifest says {entry['dtype']}")
    if list(shape) != list(entry["shape"]):
        raise ValueError(f"shape {shape}, manifest says {entry['shape']}")
    if dtype.hasobject:
        raise ValueError("object arrays are never loaded")
    offset = f.tell()
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if offset + expected != size:
        raise ValueError(f"{size - offset} data bytes for a {shape} {dtype} array")
    if expected == 0:
        return np.zeros(shape, dtype=dtype)  # type: ignore[return-value]
    return np.memmap(f, dtype=dtype, mode="r", shape=tuple(shape), offset=offset)


def load_group(
    directory: Path, group: str, names: list[str]
) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The group's arrays (read-only maps of the files checked against the manifest, each
    opened with ``O_NOFOLLOW``) and its ``extra`` data; None, with a
    :class:`CacheIntegrityWarning` unless the group was simply never written, when the manifest
    is missing or unreadable, lacks one of ``names``, or a file does not match it."""
    try:
        with _read_private(directory, f"{group}.manifest.json") as f:
            manifest = json.loads(f.read(1 << 20))
    except FileNotFoundError:
        if any((directory / n).exists() or (directory / n).is_symlink() for n in names):
            _warn(directory, group, "no manifest")
        return None
    except (OSError, ValueError) as err:
        _warn(directory, group, f"unreadable manifest ({err})")
        return None
    try:
        if manifest.get("version") != MANIFEST_VERSION:
            raise ValueError(f"manifest version {manifest.get('version')!r}")
        algorithm = manifest["hash_algorithm"]
        _hasher(algorithm)
        arrays: dict[str, np.ndarray] = {}
        for name in names:
            entry = manifest["files"].get(name)
            if entry is None:
                raise ValueError(f"{name}: not in the manifest")
            try:
                with _read_private(directory, name) as f:
                    arrays[name] = _check_file(f, entry, algorithm)
            except (OSError, ValueError) as err:
                raise ValueError(f"{name}: {err}") from None
        extra = manifest.get("extra", {})
        if not isinstance(extra, dict):
            raise ValueError("manifest's extra data is not an object")
    except (KeyError, TypeError, ValueError, ImportError) as err:
        _warn(directory, group, str(err))
        return None
    return arrays, extra


def _warn(directory: Path, group: str, why: str) -> None:
    warnings.warn(
        f"cached {group} in {directory} does not match its manifest ({why}); regenerating it",
        CacheIntegrityWarning,
        stacklevel=3,
    )
