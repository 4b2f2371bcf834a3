"""The PCIe request model of zero-copy gathers (benchmarks/hector_bench/request_model.py)."""

from __future__ import annotations

import random

import pytest

from hector_bench import request_model as rm


def test_aligned_row_costs_one_request_per_segment() -> None:
    # 32 floats starting on a boundary: one step, one segment, with or without alignment.
    assert rm.row_requests(32, 0, "none") == 1
    assert rm.row_requests(32, 0, "warp128") == 1
    assert rm.row_requests(64, 256, "none") == 2


def test_misaligned_row_hand_computed() -> None:
    # 100 floats (400 B) starting 16 B past a boundary occupy bytes [16, 416): 4 segments.
    # Unaligned: steps read [16,144) [144,272) [272,400) [400,416): 2+2+2+1 = 7 requests.
    assert rm.row_segments(100, 16) == 4
    assert rm.row_requests(100, 16, "none") == 7
    # Aligned: shift s = 4 floats, ceil((4 + 100) / 32) = 4 steps, one segment each.
    assert rm.row_shift(16) == 4
    assert rm.aligned_steps(100, 4) == 4
    assert rm.row_requests(100, 16, "warp128") == 4


@pytest.mark.parametrize("width", [1, 7, 31, 32, 33, 64, 100, 129, 256, 500, 512])
def test_aligned_is_optimal_and_never_worse(width: int) -> None:
    for start in range(0, 256, 4):
        aligned = rm.row_requests(width, start, "warp128")
        assert aligned == rm.row_segments(width, start)
        assert aligned <= rm.row_requests(width, start, "none")


@pytest.mark.parametrize("align", rm.ALIGN_MODES)
@pytest.mark.parametrize(("width", "start"), [(100, 16), (45, 124), (32, 64), (3, 0)])
def test_schedule_reads_every_element_once(align: str, width: int, start: int) -> None:
    steps = rm.warp_schedule(width, start, align)
    seen = [e for step in steps for e in step if e is not None]
    assert sorted(seen) == list(range(width))
    assert all(len(step) == rm.WARP_SIZE for step in steps)


def test_aligned_schedule_is_a_circular_shift() -> None:
    width, start = 100, 40  # s = 10
    s = rm.row_shift(start)
    for k, step in enumerate(rm.warp_schedule(width, start, "warp128")):
        addrs = [start + 4 * e for e in step if e is not None]
        assert len({a // 128 for a in addrs}) == 1, f"step {k} spans segments"
        for lane, e in enumerate(step):
            if e is not None:
                # element e is read by lane (e + s) mod 32 in step (e + s) div 32
                assert (lane, k) == ((e + s) % 32, (e + s) // 32)
                assert e == rm.aligned_element(lane, k, s)


def test_gather_requests_flat_and_aligned() -> None:
    rng = random.Random(0)
    index = [rng.randrange(100_000) for _ in range(300)]
    # 64 floats = 256 B rows always start on a boundary: 2 requests per row either way.
    assert rm.gather_requests(index, 64, "none") == 2 * len(index)
    assert rm.gather_requests(index, 64, "warp128") == 2 * len(index)
    # 100 floats: rows start at 16-byte multiples; alignment saves about 40 %.
    none = rm.gather_requests(index, 100, "none")
    aligned = rm.gather_requests(index, 100, "warp128")
    assert aligned == sum(rm.row_segments(100, r * 400) for r in index)
    assert aligned < 0.7 * none
    # a table whose base is not 128-byte aligned shifts every row
    assert rm.gather_requests([0], 32, "none", base_byte=64) == 2


def test_request_table() -> None:
    rows = {r["width"]: r for r in rm.request_table([64, 100, 128, 500])}
    assert rows[64]["saving"] == 0.0
    assert rows[128]["saving"] == 0.0
    assert rows[100]["none"] == pytest.approx(6.625)
    assert rows[100]["warp128"] == pytest.approx(4.0)
    assert rows[500]["saving"] > 0.4


def test_segments_touched() -> None:
    assert rm.segments_touched([]) == 0
    assert rm.segments_touched([0, 4, 124]) == 1
    assert rm.segments_touched([126], elem_bytes=4) == 2  # an element straddling a boundary


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rm.row_requests(0, 0, "none"), "row width must be positive"),
        (lambda: rm.row_requests(8, 0, "warp64"), "align must be one of none, warp128"),
        (lambda: rm.row_requests(8, 6, "warp128"), "multiple of 4 bytes"),
        (lambda: rm.gather_requests([1], -1, "none"), "row width must be positive"),
    ],
)
def test_invalid_inputs(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
