"""The ``tamper`` strategy: the compilation cache's entries tampered with, and its file system
failing under it.

Most cases work on a :class:`~hector.runtime.compile_cache.CompileCache` in a folder of the
worker's own: an entry is stored, then one :data:`TAMPERS` is applied (a FIFO or a link in
place of ``meta.json``, of a listed file or of the entry; a truncated, garbage or oversized
file; JSON nested up to a million deep or of the wrong shape), or the file system refuses the
store (read-only, full: ``mkdtemp``, ``copyfile`` or the metadata's write failing with
``EACCES``, ``EROFS`` or ``ENOSPC``), or a killed process's temporary folders are left (stale
and live), or ``HECTOR_COMPILE_CACHE`` is spelled at random. The cache must answer a miss (the
entry removed) or a hit (an untouched entry), never block, raise or follow a link; a refused
store keeps nothing and warns once; eviction removes only stale leftovers. Every
:data:`COMPILE_EVERY`-th case does it end to end: a program compiled through the cache, its
real entry tampered with, and a fresh ``@hector.compile`` of it must still compile and match
the float64 reference.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from hector_fuzz.api import ApiStrategy, Finding
from hector_fuzz.base import Environment
from hector_fuzz.cases import Case
from hector_fuzz.programs import Eager, make_graph, make_program, within

__all__ = ["COMPILE_EVERY", "FAULTS", "TAMPERS", "TamperStrategy"]

#: Every this many cases, one is end to end (a real compilation through a tampered cache).
COMPILE_EVERY = 100
_ERRNOS = (errno.EACCES, errno.EROFS, errno.ENOSPC)


def _pick_file(entry: Path, rng: random.Random) -> Path:
    return entry / rng.choice(sorted(p.name for p in entry.iterdir()))


def _fifo(entry: Path, rng: random.Random, outside: Path) -> None:
    target = _pick_file(entry, rng)
    target.unlink()
    os.mkfifo(target, 0o600)


def _link(entry: Path, rng: random.Random, outside: Path) -> None:
    target = _pick_file(entry, rng)
    (outside / "secret").write_bytes(target.read_bytes())  # same bytes: only the link is wrong
    target.unlink()
    target.symlink_to(outside / "secret")


def _entry_link(entry: Path, rng: random.Random, outside: Path) -> None:
    copy = outside / "copy"
    entry.rename(copy)
    entry.symlink_to(copy, target_is_directory=True)


def _entry_file(entry: Path, rng: random.Random, outside: Path) -> None:
    for p in entry.iterdir():
        p.unlink()
    entry.rmdir()
    entry.write_bytes(os.urandom(rng.randint(0, 64)))


def _truncate(entry: Path, rng: random.Random, outside: Path) -> None:
    target = _pick_file(entry, rng)
    data = target.read_bytes()
    target.write_bytes(data[: rng.randrange(len(data))] if data else b"x")


def _garbage(entry: Path, rng: random.Random, outside: Path) -> None:
    target = _pick_file(entry, rng)
    target.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))))


def _deep(entry: Path, rng: random.Random, outside: Path) -> None:
    depth = rng.choice([1000, 30_000, 300_000, 1_000_000])
    open_, close = rng.choice([("[", "]"), ('{"a":', "}")])
    (entry / "meta.json").write_text(open_ * depth + "1" + close * depth)


def _shape(entry: Path, rng: random.Random, outside: Path) -> None:
    values: list[Any] = [
        [],
        "files",
        None,
        1e308,
        {"files": []},
        {"files": {"meta.json": "0"}},
        {"files": {"../../x": "0"}},
        {"files": {"a.bin": 5}},
        {"files": {"": ""}},
        {"abi": {}, "files": {"nul\u0000": "0"}},
    ]
    (entry / "meta.json").write_text(json.dumps(rng.choice(values)))


def _huge(entry: Path, rng: random.Random, outside: Path) -> None:
    with open(entry / "meta.json", "ab") as f:
        f.write(b" " * ((1 << 20) + rng.randint(1, 1000)))


def _missing(entry: Path, rng: random.Random, outside: Path) -> None:
    _pick_file(entry, rng).unlink()


def _extra(entry: Path, rng: random.Random, outside: Path) -> None:
    (entry / "unlisted.bin").write_bytes(b"harmless")  # not listed: the entry stays good


#: Tamperings of a stored entry; True: the entry must still be a hit afterwards.
TAMPERS: dict[str, tuple[Callable[[Path, random.Random, Path], None], bool]] = {
    "fifo": (_fifo, False),
    "link": (_link, False),
    "entry-link": (_entry_link, False),
    "entry-file": (_entry_file, False),
    "truncate": (_truncate, False),
    "garbage": (_garbage, False),
    "deep-json": (_deep, False),
    "meta-shape": (_shape, False),
    "huge-meta": (_huge, False),
    "missing": (_missing, False),
    "extra": (_extra, True),
}
#: How the file system fails a store: the function that fails.
FAULTS = ("tempfile.mkdtemp", "shutil.copyfile", "pathlib.Path.write_text")


def _fail(code: int, real: Callable[..., Any], root: Path) -> Callable[..., Any]:
    """``real`` failing with ``code`` for paths under ``root`` (and working elsewhere)."""

    def fake(*args: Any, **kwargs: Any) -> Any:
        where = [str(a) for a in (*args, *kwargs.values()) if isinstance(a, (str, os.PathLike))]
        if any(w.startswith(str(root)) for w in where):
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)

    return fake


class TamperStrategy(ApiStrategy):
    """Tampered entries, failing file systems, leftovers and switch spellings."""

    name = "tamper"
    weight = 6

    def cases(self, rng: random.Random, count: int, env: Environment) -> Iterator[Case]:
        """``count`` cases, every :data:`COMPILE_EVERY`-th one end to end."""
        kinds = ["tamper"] * 6 + ["fault", "leftover", "switch"]
        for i in range(count):
            kind = "compile" if i % COMPILE_EVERY == COMPILE_EVERY - 1 else rng.choice(kinds)
            params = {
                "kind": kind,
                "tamper": rng.choice(sorted(TAMPERS)),
                "fault": rng.choice(FAULTS),
                "errno": rng.choice(_ERRNOS),
                "seed": rng.randrange(1 << 30),
            }
            yield self.make_case(i, f"{kind}: {params['tamper']}", params)

    def check(self, params: dict[str, Any]) -> bool:
        """Run the case of ``params`` in a fresh folder."""
        rng = random.Random(int(params["seed"]))
        with tempfile.TemporaryDirectory(prefix="hector-fuzz-tamper-") as tmp:
            base = Path(tmp)
            (base / "outside").mkdir()
            check = getattr(self, f"_{params['kind']}")
            check(base, params, rng)
        return True

    @staticmethod
    def _cache(base: Path, max_bytes: int = 1 << 20) -> Any:
        from hector.runtime.compile_cache import CompileCache

        root = base / "cache"
        root.mkdir(mode=0o700)
        return CompileCache(root, max_bytes)

    def _stored(self, base: Path, rng: random.Random) -> tuple[Any, str, dict[str, Any]]:
        from hector.runtime.compile_cache import key_of

        cache = self._cache(base)
        files = {}
        for name in ("kernel.so", "stages.json.gz")[: rng.randint(1, 2)]:
            (base / name).write_bytes(os.urandom(rng.randint(1, 2000)))
            files[name] = base / name
        k = key_of(rng.random())
        meta = {"abi": {"f": [1, 2]}, "seconds": rng.random()}
        if not cache.store(k, files, meta):
            raise Finding("a store on a healthy file system kept nothing")
        return cache, k, meta

    def _tamper(self, base: Path, params: dict[str, Any], rng: random.Random) -> None:
        cache, k, meta = self._stored(base, rng)
        tamper, still_good = TAMPERS[str(params["tamper"])]
        tamper(cache.root / k, rng, base / "outside")
        outside = {p.name: p.read_bytes() for p in (base / "outside").iterdir() if p.is_file()}
        found = cache.load(k)
        if still_good and (found is None or found[1]["seconds"] != meta["seconds"]):
            raise Finding(f"a harmless change ({params['tamper']}) lost the entry")
        if not still_good and found is not None:
            raise Finding(f"a tampered entry ({params['tamper']}) was a hit")
        for name, data in outside.items():  # nothing outside the cache is touched
            if (base / "outside" / name).read_bytes() != data:
                raise Finding(f"{name} outside the cache was changed")
        cache.evict()

    def _fault(self, base: Path, params: dict[str, Any], rng: random.Random) -> None:
        from hector.runtime import compile_cache
        from hector.runtime.compile_cache import key_of

        cache = self._cache(base)
        (base / "lib").write_bytes(os.urandom(100))
        module, _, attr = str(params["fault"]).rpartition(".")
        owner: Any = {"tempfile": tempfile, "shutil": compile_cache.shutil, "pathlib.Path": Path}
        target = owner[module]
        fake = _fail(int(params["errno"]), getattr(target, attr), cache.root)
        with (
            mock.patch.object(target, attr, fake),
            mock.patch.object(compile_cache, "_WARNED", set()),
            warnings.catch_warnings(record=True) as caught,
        ):
            warnings.simplefilter("always")
            for i in range(rng.randint(1, 3)):
                if cache.store(key_of(i), {"kernel.so": base / "lib"}, {}):
                    raise Finding(f"a store succeeded although {params['fault']} failed")
        if sum(issubclass(w.category, RuntimeWarning) for w in caught) != 1:
            raise Finding(f"{len(caught)} warnings for a failing cache, not one")
        if list(cache.root.iterdir()):
            raise Finding("a failed store left files in the cache")

    def _leftover(self, base: Path, params: dict[str, Any], rng: random.Random) -> None:
        from hector.runtime import compile_cache

        cache = self._cache(base)
        stale_age = compile_cache.STALE_SECONDS + 1 + rng.random() * 10_000
        dead, live = 2**22 + rng.randrange(1000), os.getpid()
        expect: dict[str, bool] = {}  # name -> removed
        written = 0
        for i in range(rng.randint(1, 6)):
            pid = rng.choice([dead, live])
            age = rng.choice([stale_age, 5.0])
            name = f"{rng.choice(['.tmp', '.trash'])}-{pid}-{i}"
            folder = cache.root / name
            folder.mkdir()
            size = rng.randint(0, 500)
            (folder / "kernel.so").write_bytes(b"x" * size)
            written += size
            os.utime(folder, (os.path.getmtime(folder) - age,) * 2)
            expect[name] = age > compile_cache.STALE_SECONDS and (
                pid == dead or age > 10 * compile_cache.STALE_SECONDS
            )
        if cache.size() != written:  # leftovers hold disk: they count against the bound
            raise Finding(f"size() is {cache.size()} with {written} bytes of leftovers")
        cache.evict()
        for name, removed in expect.items():
            if (cache.root / name).exists() == removed:
                raise Finding(f"{name}: {'kept' if removed else 'removed'} by evict()")

    def _switch(self, base: Path, params: dict[str, Any], rng: random.Random) -> None:
        from hector.runtime.compile_cache import default_cache

        word = rng.choice(["off", "0", "false", "no", "on", "1", "yes", "offf", ""])
        spelled = "".join(c.upper() if rng.random() < 0.5 else c for c in word)
        spelled = " " * rng.randint(0, 2) + spelled + "\t" * rng.randint(0, 1)
        off = word in ("off", "0", "false", "no")
        env = {"HECTOR_COMPILE_CACHE": spelled, "HECTOR_CACHE_DIR": str(base)}
        with mock.patch.dict(os.environ, env):
            cache = default_cache()
        if (cache is None) != off:
            raise Finding(f"HECTOR_COMPILE_CACHE={spelled!r}: cache {'on' if cache else 'off'}")

    def _compile(self, base: Path, params: dict[str, Any], rng: random.Random) -> None:
        import hector

        seed = rng.randrange(2)
        program, g = make_program(seed), make_graph(0)
        args = [torch.randn(s) for s in program.shapes(g.num_nodes)]
        want = program.run(Eager(g), args[0].double(), [a.double() for a in args[1:]])
        (base / "home").mkdir(mode=0o700)
        with mock.patch.dict(os.environ, {"HECTOR_CACHE_DIR": str(base / "home")}):
            for attempt in range(2):  # stored, then found tampered
                fn = hector.compile(program.forward())
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = fn(g, *args)
                for o, w in zip(_list(got), _list(want), strict=True):
                    within(o, w, f"end-to-end result, attempt {attempt}")
                root = base / "home" / "compiled"
                for entry in [e for e in root.iterdir() if not e.name.startswith(".")]:
                    tamper, _ = TAMPERS[str(params["tamper"])]
                    with contextlib.suppress(OSError):
                        tamper(entry, rng, base / "outside")


def _list(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple) else [out]
