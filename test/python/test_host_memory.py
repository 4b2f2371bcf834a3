"""Hector's host memory cache (runtime/host_memory.py): the buffers of generated CPU code and
of compiled functions' results are reused between calls, and never held above the peak plain
malloc/free would reach."""

from __future__ import annotations

import ctypes
import gc
import threading

import numpy as np
import pytest
import torch

from hector.runtime import host_memory

MIB = 2**20
PAGE = 4096


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Every test starts from an empty cache with the default limit, and leaves it so."""
    gc.collect()
    host_memory.empty_cache()
    host_memory.set_cache_limit(None)
    yield
    gc.collect()
    host_memory.set_cache_limit(None)
    host_memory.empty_cache()


def _resident_pages(address: int, nbytes: int) -> int:
    """How many pages of ``[address, address + nbytes)`` are resident (mincore(2))."""
    libc = ctypes.CDLL(None, use_errno=True)
    pages = (nbytes + PAGE - 1) // PAGE
    vec = (ctypes.c_ubyte * pages)()
    rc = libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), vec)
    assert rc == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec)


def test_a_freed_block_serves_the_next_request_of_about_its_size() -> None:
    before = host_memory.stats()
    a = host_memory.empty((MIB,))  # 4 MiB of float32
    address = a.ctypes.data
    assert address % PAGE == 0
    a[:] = 1.0  # every page resident
    del a
    idle = host_memory.stats()
    assert idle["idle_bytes"] == 4 * MIB
    assert idle["live_bytes"] == before["live_bytes"]
    b = host_memory.empty((850_000,))  # 3.4 MiB: the idle 4 MiB block fits
    assert b.ctypes.data == address
    after = host_memory.stats()
    assert after["hits"] == before["hits"] + 1
    assert after["misses"] == before["misses"] + 1
    assert after["idle_bytes"] == 0
    # the pages past the request went back to the system: no more resident than a fresh block
    needed = (850_000 * 4 + PAGE - 1) // PAGE * PAGE
    assert _resident_pages(address + needed, 4 * MIB - needed) == 0


def test_a_much_larger_block_is_split_for_a_small_request() -> None:
    big = host_memory.empty((16 * MIB // 4,))  # 16 MiB
    big[:] = 1.0  # every page resident
    address = big.ctypes.data
    del big
    before = host_memory.stats()
    small = host_memory.empty((2 * MIB // 4,))  # 2 MiB: 16 MiB is over a quarter larger
    stats = host_memory.stats()
    # the idle block's head serves the request (resident, no fault) and its tail stays idle and
    # resident: live plus idle bytes are what the block held, never more than malloc/free's peak
    assert small.ctypes.data == address
    assert _resident_pages(address, 16 * MIB) == 16 * MIB // PAGE
    assert stats["live_bytes"] == 2 * MIB
    assert stats["idle_bytes"] == 14 * MIB
    assert stats["released_bytes"] == before["released_bytes"]
    assert stats["resized"] == before["resized"] + 1
    assert stats["misses"] == before["misses"]
    assert stats["mapped_bytes"] == before["mapped_bytes"]
    # the tail serves the next request of its size without mapping anything
    rest = host_memory.empty((12 * MIB // 4,))
    assert rest.ctypes.data == address + 2 * MIB
    after = host_memory.stats()
    assert after["mapped_bytes"] == before["mapped_bytes"]
    assert after["hits"] == before["hits"] + 1
    rest[:] = 3.0
    small[:] = 2.0
    assert float(rest.sum()) == 3.0 * 3 * MIB
    assert float(small.sum()) == 2.0 * MIB // 2
    del small, rest


def test_a_split_tail_too_small_for_any_request_is_unmapped() -> None:
    block = host_memory.empty((11 * MIB // 16,))  # 2.75 MiB
    del block
    before = host_memory.stats()
    head = host_memory.empty((2 * MIB // 4,))  # 2 MiB: the 0.75 MiB tail is under the minimum
    after = host_memory.stats()
    assert after["resized"] == before["resized"] + 1
    assert after["released_bytes"] - before["released_bytes"] == 3 * MIB // 4
    assert after["idle_bytes"] == 0
    assert after["live_bytes"] == 2 * MIB
    head[:] = 1.0
    del head


def test_steps_that_alternate_small_and_large_requests_map_nothing_once_warm() -> None:
    """A training step's forward asks for several small buffers, its backward for one large
    one: the forward splits the block the backward left idle, the backward grows a piece back
    from the others, and once warm a step maps no fresh page (a per-step fault churn of
    hundreds of MiB on synthetic:am when a split's tail was unmapped)."""
    small, large = 4 * MIB, 16 * MIB

    def step() -> int:
        before = host_memory.stats()["mapped_bytes"]
        forward = [host_memory.empty((small // 4,)) for _ in range(2)]  # live together
        for b in forward:
            b[:] = 1.0
        del forward, b
        backward = host_memory.empty((large // 4,))
        backward[:] = 2.0
        assert float(backward[-1]) == 2.0
        del backward
        stats = host_memory.stats()
        assert stats["live_bytes"] == 0
        assert stats["idle_bytes"] <= large  # never more than the step's peak
        return stats["mapped_bytes"] - before

    assert step() > 0  # warm-up: the first step maps its peak
    assert [step() for _ in range(3)] == [0, 0, 0]


def test_blocks_of_sizes_that_alternate_are_resized_not_mapped_again() -> None:
    """A training step's forward asks for [N, out] buffers and its backward for [N, in] ones:
    each phase's requests resize the other's idle blocks (only growth is newly mapped) instead
    of unmapping them and faulting fresh blocks in every step."""
    wide, narrow = 1_920_000, 1_280_000  # bytes: [20000, 24] and [20000, 16] float32

    def phase(nbytes: int) -> None:
        blocks = [host_memory.empty((nbytes // 4,)) for _ in range(3)]
        for b in blocks:
            b[:] = 1.0
        del blocks

    phase(wide)
    phase(narrow)
    before = host_memory.stats()
    for _ in range(3):
        phase(wide)
        phase(narrow)
    after = host_memory.stats()
    assert after["misses"] == before["misses"]
    # each wide phase grows the narrow blocks back: only the bytes idle memory did not hold
    # are new, 3 x (wide - narrow) per wide phase (the narrow phases only shrink)
    grown = 3 * 3 * (wide - narrow)
    assert after["mapped_bytes"] - before["mapped_bytes"] <= grown + 3 * 3 * PAGE
    assert after["live_bytes"] == 0
    assert after["idle_bytes"] <= 3 * (wide + PAGE)


def test_a_growing_block_takes_the_pages_of_other_idle_blocks_before_new_ones() -> None:
    small = [host_memory.empty((MIB // 4,)) for _ in range(3)]  # 3 x 1 MiB, every page written
    for i, b in enumerate(small):
        b[:] = float(i)
    del small, b
    gc.collect()
    before = host_memory.stats()
    big = host_memory.empty((4 * MIB // 4,))  # 4 MiB: the three idle MiB and one new
    after = host_memory.stats()
    assert after["resized"] == before["resized"] + 1
    assert after["misses"] == before["misses"]
    assert after["mapped_bytes"] - before["mapped_bytes"] == MIB
    assert after["idle_bytes"] == 0
    assert after["live_bytes"] == 4 * MIB
    address = big.ctypes.data
    assert _resident_pages(address, 3 * MIB) == 3 * MIB // PAGE  # moved, not faulted again
    assert _resident_pages(address + 3 * MIB, MIB) == 0
    big[:] = 2.0
    assert float(big.sum()) == 2.0 * MIB


def test_idle_bytes_stay_under_the_limit_and_empty_cache_releases_them() -> None:
    assert host_memory.set_cache_limit(6 * MIB) == 6 * MIB
    blocks = [host_memory.empty((MIB,)) for _ in range(3)]  # 3 x 4 MiB
    del blocks
    gc.collect()
    assert host_memory.stats()["idle_bytes"] <= 6 * MIB
    host_memory.empty_cache()
    assert host_memory.stats()["idle_bytes"] == 0


def test_small_requests_bypass_the_cache() -> None:
    before = host_memory.stats()
    a = host_memory.empty((10, 10))
    a[:] = 1.0
    zero = host_memory.empty((0, 8))
    assert zero.shape == (0, 8)
    assert a.sum() == 100.0
    del a, zero
    after = host_memory.stats()
    assert (after["hits"], after["misses"]) == (before["hits"], before["misses"])


def test_arrays_are_writable_typed_and_outlive_their_views_and_tensors() -> None:
    a = host_memory.empty((512, 1024), np.int32)
    assert a.dtype == np.int32
    assert a.flags["C_CONTIGUOUS"]
    assert a.flags["WRITEABLE"]
    t = torch.from_numpy(a[1:])
    del a
    gc.collect()
    assert host_memory.stats()["live_bytes"] == 2 * MIB  # the tensor keeps the block
    t.fill_(7)
    assert int(t.sum()) == 7 * 511 * 1024
    del t
    gc.collect()
    assert host_memory.stats()["live_bytes"] == 0


def test_bad_shapes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="negative dimension"):
        host_memory.empty((4, -1))


def test_threads_share_the_cache_safely() -> None:
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(50):
                a = host_memory.empty(((1 + (seed + i) % 3) * MIB // 4,))
                a[:] = seed
                assert float(a[0]) == seed
                assert float(a[-1]) == seed
                del a
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert host_memory.stats()["live_bytes"] == 0


def test_compiled_results_and_buffers_come_from_the_cache() -> None:
    """A second call of a compiled function maps nothing new: its results and the generated
    code's intermediate buffers reuse the first call's blocks."""
    from hector import models
    from hector.data.graph import random_graph

    g = random_graph(60_000, 240_000, 3, seed=0)
    layer = models.RGCNLayer(16, 16, 3)
    x = torch.randn(g.num_nodes, 16)
    with torch.no_grad():
        first = layer(g, x)
        del first
        gc.collect()
        before = host_memory.stats()
        second = layer(g, x)
    after = host_memory.stats()
    assert after["misses"] == before["misses"]
    assert after["hits"] > before["hits"]
    assert second.data_ptr() % PAGE == 0
