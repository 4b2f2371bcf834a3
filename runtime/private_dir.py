"""Per-user private directories: where Hector writes files of its own (offload roots, caches).

A directory under a shared, world-writable place such as ``/tmp`` can be created first by
someone else, or replaced by a symbolic link to a directory of their choice. Trusted tools
(ssh-agent, systemd's runtime directories, pip's and Triton's caches) therefore check what
they find before using it; :func:`private_dir` does the same:

* it creates the directory with mode ``0700`` when it is missing (never its parents under a
  shared place: those are the caller's, e.g. ``tempfile.gettempdir()``);
* it refuses (:class:`UnsafeDirectoryError`) a path that is a symbolic link, not a directory,
  owned by another user, or writable by group or others — it never repairs or follows one.

:func:`open_private_file` opens a file inside such a directory relative to the directory's
descriptor with ``O_NOFOLLOW``, so a link planted in the directory is refused too, and
:func:`write_private_file` writes one atomically (a temporary name, then ``rename``).

Only :mod:`os` is used: nothing above the runtime is imported.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = [
    "UnsafeDirectoryError",
    "check_private_dir",
    "open_private_file",
    "private_dir",
    "rename_in",
    "unlink_in",
    "user_cache_dir",
    "write_private_file",
]


class UnsafeDirectoryError(OSError):
    """A directory Hector would write in is not private to the current user."""


def _why_unsafe(path: str, st: os.stat_result) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by the current user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_private_dir(path: str | os.PathLike[str]) -> Path:
    """Raise :class:`UnsafeDirectoryError` unless ``path`` is an existing directory (not a
    link) owned by the current user and writable by nobody else; return it as a Path."""
    p = os.fspath(path)
    if "\0" in p:
        raise UnsafeDirectoryError(f"directory path {p!r} contains a NUL byte")
    st = os.lstat(p)
    why = _why_unsafe(p, st)
    if why is not None:
        raise UnsafeDirectoryError(
            f"refusing to use '{p}': it {why}; remove it or choose another directory"
        )
    return Path(p)


def private_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory private to the current user: created with mode 0700 when
    missing (its parent must exist), checked with :func:`check_private_dir` either way."""
    p = os.fspath(path)
    if "\0" in p:
        raise UnsafeDirectoryError(f"directory path {p!r} contains a NUL byte")
    try:
        os.mkdir(p, 0o700)
    except FileExistsError:
        pass
    return check_private_dir(p)


def user_cache_dir(name: str) -> Path:
    """A private per-user cache directory for ``name``: ``$HECTOR_CACHE_DIR/<name>`` when that
    variable is set, else ``$XDG_CACHE_HOME/hector/<name>`` (``~/.cache/hector/<name>``).
    The user's own cache home is created with its parents; every level Hector creates is 0700
    and the last two are checked."""
    base = os.environ.get("HECTOR_CACHE_DIR")
    if base:
        root = Path(base)
    else:
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        if not os.path.isabs(home):
            home = os.path.join(tempfile.gettempdir(), f"hector-cache.{os.geteuid()}")
        os.makedirs(home, mode=0o700, exist_ok=True)
        root = Path(home) / "hector"
    if not root.exists():
        os.makedirs(root.parent, mode=0o700, exist_ok=True)
    private_dir(root)
    return private_dir(root / name)


def open_private_file(
    directory: str | os.PathLike[str], name: str, flags: int, mode: int = 0o600
) -> int:
    """A descriptor of ``name`` inside the private ``directory``, opened relative to the
    directory's own descriptor with ``O_NOFOLLOW`` (a link in its place is refused with
    ``OSError(ELOOP)``). ``name`` must be a plain file name (no ``/``)."""
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    check_private_dir(directory)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
    finally:
        os.close(dfd)


def rename_in(directory: str | os.PathLike[str], src: str, dst: str) -> None:
    """Rename ``src`` to ``dst`` inside ``directory``, both relative to the directory's own
    descriptor (opened ``O_NOFOLLOW``): a link in place of the directory is refused, and a link
    at ``dst`` is replaced, never followed."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.rename(src, dst, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(dfd)


def unlink_in(directory: str | os.PathLike[str], name: str, *, missing_ok: bool = True) -> None:
    """Remove ``name`` (a link itself, never its target) inside ``directory``, relative to the
    directory's descriptor; errors are ignored when ``missing_ok`` (clean-up paths)."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.unlink(name, dir_fd=dfd)
        finally:
            os.close(dfd)
    except OSError:
        if not missing_ok:
            raise


def write_private_file(directory: str | os.PathLike[str], name: str, data: bytes) -> None:
    """Write ``data`` as ``name`` in the private ``directory`` atomically: to a fresh temporary
    name (``O_EXCL | O_NOFOLLOW``), then renamed over ``name``; a link at ``name`` is replaced,
    never written through."""
    tmp = f".{name}.{os.getpid()}.tmp"
    fd = open_private_file(directory, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb", closefd=True) as f:
            f.write(data)
        rename_in(directory, tmp, name)
    except BaseException:
        unlink_in(directory, tmp)
        raise
