"""Hector's caching CPU allocator (``hector.runtime.cpu_allocator``): reuse by size, the cache
limit, bit-identical training through it, and its errors.

Installing it changes the whole process's CPU allocations, so every test that installs it
runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from hector.offload.cache import CPU_ALLOCATOR_ENV as ENV
from hector.runtime import cpu_allocator


def _run(code: str, *, unset: tuple[str, ...] = (), **env: str) -> dict:
    """Run ``code`` in a fresh interpreter (without the variables ``unset``); it prints one
    JSON object last."""
    environ = {k: v for k, v in {**os.environ, **env}.items() if k not in unset}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,
        env=environ,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_blocks_are_reused_by_size_and_the_limit_unmaps_the_rest():
    got = _run(
        """
        import json, torch
        from hector.runtime import cpu_allocator as ca
        ca.install(cache_limit=8 << 20, min_block=1 << 20)
        MiB = 1 << 20
        a = torch.empty(4 * MiB, dtype=torch.uint8); ptr = a.data_ptr(); del a
        b = torch.empty(4 * MiB - 100, dtype=torch.uint8)  # the same pages, rounded
        reused = b.data_ptr() == ptr
        first = ca.stats()
        del b
        blocks = [torch.empty(4 * MiB, dtype=torch.uint8) for _ in range(3)]
        small = torch.empty(1000)  # under min_block: PyTorch's own allocator
        del blocks
        full = ca.stats()
        y = torch.nn.functional.gelu(torch.randn(MiB))  # raw_allocate / raw_deallocate
        emptied = ca.empty_cache()
        print(json.dumps({"reused": reused, "first": first, "full": full,
                          "emptied": emptied, "after": ca.stats(), "gelu": float(y.sum())}))
        """
    )
    assert got["reused"]
    assert got["first"]["hits"] == 1
    assert got["first"]["misses"] == 1
    # Three 4 MiB blocks freed under an 8 MiB limit: two kept, one unmapped at once.
    assert got["full"]["cached_bytes"] == 8 << 20
    assert got["full"]["unmapped_on_free"] == 1
    assert got["full"]["live_blocks"] == 0
    # gelu took both cached blocks (its input and its output); the input's came back.
    assert got["emptied"] == 4 << 20
    assert got["after"]["cached_bytes"] == 0
    assert got["after"]["mapped_bytes"] == 4 << 20  # only y's block is still mapped


def test_a_request_no_cached_block_fits_resizes_one_instead_of_mapping_more():
    got = _run(
        """
        import json, torch
        from hector.runtime import cpu_allocator as ca
        ca.install(cache_limit=64 << 20, min_block=1 << 20)
        MiB = 1 << 20
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096
        a = torch.ones(8 * MiB, dtype=torch.uint8); ptr = a.data_ptr(); del a
        before = rss()
        b = torch.ones(2 * MiB, dtype=torch.uint8)  # shrinks the 8 MiB block in place
        shrunk = {"same": b.data_ptr() == ptr, "freed": before - rss(), **ca.stats()}
        del b
        c = torch.full((6 * MiB,), 3, dtype=torch.uint8)  # grows the 2 MiB block
        grown = ca.stats()
        grown["sum"] = int(c[:: 1 << 16].sum()) << 16  # a strided sum: no large temporary
        print(json.dumps({"shrunk": shrunk, "grown": grown}))
        """
    )
    shrunk, grown = got["shrunk"], got["grown"]
    assert shrunk["same"]
    assert shrunk["freed"] >= 5 << 20  # the 6 MiB tail left the process
    assert (shrunk["misses"], shrunk["resized"], shrunk["mapped_bytes"]) == (1, 1, 2 << 20)
    assert (grown["misses"], grown["resized"], grown["mapped_bytes"]) == (1, 2, 6 << 20)
    assert grown["sum"] == 3 * (6 << 20)
    assert grown["cached_bytes"] == 0


def test_a_refused_allocation_is_passed_on_then_raises_and_keeps_the_cached_block():
    got = _run(
        """
        import json, resource, torch
        torch.set_num_threads(1)
        from hector.runtime import cpu_allocator as ca
        ca.install(cache_limit=64 << 20, min_block=1 << 20)
        MiB = 1 << 20
        a = torch.ones(8 * MiB, dtype=torch.uint8); del a
        with open("/proc/self/status") as f:
            vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (vm + 64 * MiB, hard))
        try:  # neither growing the cached block nor a new mapping fits under the limit
            torch.empty(1 << 30, dtype=torch.uint8)
            error = None
        except (MemoryError, RuntimeError) as err:
            error = type(err).__name__
        failed = ca.stats()
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        b = torch.ones(8 * MiB, dtype=torch.uint8)
        print(json.dumps({"error": error, "failed": failed, "after": ca.stats(),
                          "sum": int(b[:: 1 << 16].sum())}))
        """
    )
    assert got["error"] is not None
    assert got["failed"]["passed_on"] == 1  # glibc's heap was asked too, and refused
    # The 8 MiB block is back in the cache, whole, and serves the next request of its size.
    assert (got["failed"]["cached_bytes"], got["failed"]["mapped_bytes"]) == (8 << 20, 8 << 20)
    assert got["after"]["hits"] == got["failed"]["hits"] + 1
    assert got["after"]["cached_bytes"] == 0
    assert got["sum"] == 128


_TRAIN = """
import hashlib, json, sys, tempfile, warnings, torch, torch.nn.functional as F
import hector
if sys.argv[1] == "caching":
    hector.offload.enable_caching_allocator(cache_limit=64 << 20, min_block=4096)
from hector_bench.offload_models import build_model
from hector.runtime import cpu_allocator
torch.manual_seed(0)
model = build_model("gpt", 2, 128, 2, 128, 64)  # activations of 64 KiB and more
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    wrapped = hector.offload(model, policy="all", root=tempfile.mkdtemp())
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
gen = torch.Generator().manual_seed(0)
losses = []
for _ in range(3):
    ids = torch.randint(0, 128, (2, 64), generator=gen)
    loss = F.cross_entropy(wrapped(ids).reshape(-1, 128), ids.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item())
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
print(json.dumps({"losses": losses, "params": digest.hexdigest(),
                  "release": wrapped.cache.release_memory, "stats": cpu_allocator.stats(),
                  "offloaded": wrapped.cache.counters["offloaded"],
                  "note": wrapped.cache.stats().get("cpu_allocator_note"),
                  "warnings": [str(w.message) for w in caught]}))
wrapped.close()
"""


def test_offloaded_training_through_the_caching_allocator_is_bit_identical():
    plain = _run(f"import sys; sys.argv = ['x', 'plain']\n{_TRAIN}")
    caching = _run(f"import sys; sys.argv = ['x', 'caching']\n{_TRAIN}")
    assert caching["offloaded"] > 0
    assert caching["losses"] == plain["losses"]
    assert caching["params"] == plain["params"]
    # The cache leaves freed activations to the allocator, which reused blocks.
    assert plain["release"] == "advise"  # HECTOR_CPU_ALLOCATOR=pytorch (conftest.py)
    assert plain["stats"] == {}
    assert caching["release"] == "allocator"
    assert caching["stats"]["hits"] > caching["stats"]["misses"] > 0


def test_an_offloading_cache_installs_the_allocator_by_default():
    plain = _run(f"import sys; sys.argv = ['x', 'plain']\n{_TRAIN}")
    default = _run(f"import sys; sys.argv = ['x', 'default']\n{_TRAIN}", unset=(ENV,))
    assert default["release"] == "allocator"
    assert default["stats"]["hits"] > default["stats"]["misses"] > 0
    assert default["stats"]["mapped_bytes"] > 0
    assert (default["note"], default["warnings"]) == (None, [])
    assert default["losses"] == plain["losses"]
    assert default["params"] == plain["params"]


def test_where_the_allocator_cannot_be_built_the_default_warns_and_hands_memory_back(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    got = _run(
        f"import sys; sys.argv = ['x', 'default']\n{_TRAIN}",
        unset=(ENV,),
        HECTOR_CACHE_DIR=str(blocker / "cache"),
    )
    assert got["release"] == "advise"
    assert got["stats"] == {}
    assert got["note"].startswith("could not build Hector's caching CPU allocator")
    assert len(got["warnings"]) == 1
    assert 'release_memory="advise"' in got["warnings"][0]
    assert got["offloaded"] > 0


def test_the_default_leaves_the_allocator_alone_where_nothing_is_offloaded_on_cpu(monkeypatch):
    from torch import nn

    from hector.offload import OffloadError, TensorCache

    monkeypatch.delenv(ENV)
    assert TensorCache(policy="none").release_memory == "advise"
    on_meta = nn.Linear(4, 4, device="meta")  # as a CUDA module: no CPU activations
    assert TensorCache(policy="all", module=on_meta).release_memory == "advise"
    assert not cpu_allocator.installed()
    monkeypatch.setenv(ENV, "jemalloc")
    with pytest.raises(OffloadError, match=r"HECTOR_CPU_ALLOCATOR must be 'caching' or 'pytorch'"):
        TensorCache(policy="all")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cache_limit": -1}, "cache_limit must be an int >= 0"),
        ({"cache_limit": 1.5}, "cache_limit must be an int >= 0"),
        ({"min_block": 100}, "min_block must be an int >= 4096"),
        ({"min_block": True}, "min_block must be an int >= 4096"),
    ],
)
def test_out_of_range_limits_are_refused_before_anything_is_installed(kwargs, message):
    with pytest.raises(cpu_allocator.CpuAllocatorError, match=message):
        cpu_allocator.install(**kwargs)
    assert not cpu_allocator.installed()
    assert cpu_allocator.stats() == {}
    assert cpu_allocator.empty_cache() == 0


def test_a_source_that_does_not_compile_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.cpp"
    bad.write_text("this is not C++\n")
    got = _run(
        f"""
        import json
        from hector.runtime import cpu_allocator as ca
        ca.source_path = lambda: {str(bad)!r}
        try:
            ca.install()
        except ca.CpuAllocatorError as err:
            print(json.dumps({{"error": str(err), "installed": ca.installed()}}))
        """,
        HECTOR_CACHE_DIR=str(tmp_path / "cache"),
    )
    assert got["error"].startswith("could not build Hector's caching CPU allocator")
    assert "C++17 compiler and ninja" in got["error"]
    assert not got["installed"]


def test_a_cache_directory_others_can_write_is_refused_before_anything_is_built(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # anyone could plant the library the process would load
    got = _run(
        """
        import json
        from hector.runtime import cpu_allocator as ca
        try:
            ca.install()
        except ca.CpuAllocatorError as err:
            print(json.dumps({"error": str(err), "installed": ca.installed()}))
        """,
        HECTOR_CACHE_DIR=str(shared),
    )
    assert "writable by group or others" in got["error"]
    assert not got["installed"]
    assert list(shared.iterdir()) == []


def test_the_allocator_release_mode_needs_the_allocator():
    from hector.offload import OffloadError, TensorCache

    with pytest.raises(OffloadError, match=r"enable_caching_allocator\(\) first"):
        TensorCache(policy="all", release_memory="allocator")
