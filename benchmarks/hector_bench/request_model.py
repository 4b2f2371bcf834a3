"""PCIe request model for GPU gathers from unified (zero-copy) memory.

A GPU reads pinned host memory over PCIe in requests of at most 128 bytes, each covering one
128-byte-aligned *segment*. A warp (32 lanes) issuing one load instruction sends one request per
distinct segment its active lanes touch. Gathering a row of ``width`` floats therefore costs:

* ``align = "none"`` (one warp per row, lane ``l`` of step ``k`` reads element ``32k + l``):
  when the row does not start on a 128-byte boundary, every full step straddles two segments,
  so a row costs up to about twice the segments it occupies;
* ``align = "warp128"`` (the thread→element mapping shifted circularly by the row's
  misalignment ``s``: element ``e`` is read by lane ``(e + s) mod 32`` in step
  ``(e + s) div 32``): every step covers exactly one aligned segment, so a row costs exactly the
  segments it occupies, ``ceil((s + width) / 32)`` for 4-byte elements.

:func:`gather_requests` also models the flat mapping the ``align = "none"`` gather kernel uses
(one thread per ``(row, column)`` element, consecutive threads along the row, so a warp may span
rows), which is what ``hector bench gather`` compares against. The functions here are the
reference the GPU lowering (``lowering/gpu/intra_to_gpu.py``, :func:`aligned_element`) follows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hector.dialects.hector_intra import ALIGN_MODES

SEGMENT_BYTES = 128
WARP_SIZE = 32
FLOAT_BYTES = 4


def _check(width: int) -> None:
    if width <= 0:
        raise ValueError(f"row width must be positive, got {width}")


def _check_align(align: str) -> None:
    if align not in ALIGN_MODES:
        raise ValueError(f"align must be one of {', '.join(ALIGN_MODES)}, got {align!r}")


def segments_touched(byte_addresses: Iterable[int], elem_bytes: int = FLOAT_BYTES) -> int:
    """Requests one warp-wide load sends: distinct 128-byte segments of the lanes' elements."""
    segs: set[int] = set()
    for a in byte_addresses:
        segs.add(a // SEGMENT_BYTES)
        segs.add((a + elem_bytes - 1) // SEGMENT_BYTES)
    return len(segs)


def row_shift(start_byte: int) -> int:
    """The misalignment ``s`` of a row, in elements: ``(start mod 128) / FLOAT_BYTES``."""
    if start_byte < 0 or start_byte % FLOAT_BYTES:
        raise ValueError(
            f"row start must be a non-negative multiple of {FLOAT_BYTES} bytes, got {start_byte}"
        )
    return (start_byte % SEGMENT_BYTES) // FLOAT_BYTES


def aligned_steps(width: int, shift: int) -> int:
    """Loop trip count of one warp under ``warp128``: ``ceil((shift + width) / 32)``."""
    per = SEGMENT_BYTES // FLOAT_BYTES
    return (shift + width + per - 1) // per


def aligned_element(lane: int, step: int, shift: int) -> int:
    """Element of the row read by ``lane`` in ``step`` under ``warp128`` (may fall outside the
    row, then the lane idles): ``32 * step + lane - shift``."""
    per = SEGMENT_BYTES // FLOAT_BYTES
    return step * per + lane - shift


def warp_schedule(width: int, start_byte: int, align: str) -> list[list[int | None]]:
    """The thread→element mapping of one warp gathering one row: for each step, the element
    each lane reads (``None`` when the lane idles)."""
    _check(width)
    _check_align(align)
    steps: list[list[int | None]] = []
    if align == "none":
        for k in range((width + WARP_SIZE - 1) // WARP_SIZE):
            lanes = [k * WARP_SIZE + lane for lane in range(WARP_SIZE)]
            steps.append([e if e < width else None for e in lanes])
        return steps
    shift = row_shift(start_byte)
    for k in range(aligned_steps(width, shift)):
        row: list[int | None] = []
        for lane in range(WARP_SIZE):
            e = aligned_element(lane, k, shift)
            row.append(e if 0 <= e < width else None)
        steps.append(row)
    return steps


def row_requests(width: int, start_byte: int, align: str) -> int:
    """Requests (≤128 bytes each) one warp issues to read a row of ``width`` elements that
    starts at byte address ``start_byte``, with or without the alignment optimisation."""
    total = 0
    for step in warp_schedule(width, start_byte, align):
        addrs = [start_byte + e * FLOAT_BYTES for e in step if e is not None]
        total += segments_touched(addrs)
    return total


def row_segments(width: int, start_byte: int) -> int:
    """Lower bound: the 128-byte segments the row occupies."""
    _check(width)
    first = start_byte // SEGMENT_BYTES
    last = (start_byte + width * FLOAT_BYTES - 1) // SEGMENT_BYTES
    return last - first + 1


def mean_row_requests(width: int, align: str) -> float:
    """Average requests per row over a table of rows ``0, 1, 2, ...`` of ``width`` elements
    (row ``r`` starts at byte ``r * width * FLOAT_BYTES``; the pattern repeats every 128 rows)."""
    period = SEGMENT_BYTES  # r * width * FLOAT_BYTES mod 128 repeats with period dividing 128
    total = sum(row_requests(width, r * width * FLOAT_BYTES, align) for r in range(period))
    return total / period


def gather_requests(
    index: Sequence[int],
    width: int,
    align: str,
    base_byte: int = 0,
) -> int:
    """Requests to read the rows ``index`` of a row-major table at ``base_byte``, as the gather
    kernel maps threads: ``"none"`` is the flat mapping (thread ``g`` reads element
    ``g mod width`` of output row ``g div width``; warps are 32 consecutive threads and may span
    rows); ``"warp128"`` is one warp per row with the aligned, circularly shifted mapping."""
    _check(width)
    _check_align(align)
    row_bytes = width * FLOAT_BYTES
    if align == "warp128":
        return sum(row_requests(width, base_byte + r * row_bytes, align) for r in index)
    total_threads = len(index) * width
    total = 0
    for w0 in range(0, total_threads, WARP_SIZE):
        addrs = []
        for g in range(w0, min(w0 + WARP_SIZE, total_threads)):
            i, j = divmod(g, width)
            addrs.append(base_byte + index[i] * row_bytes + j * FLOAT_BYTES)
        total += segments_touched(addrs)
    return total


def request_table(widths: Iterable[int]) -> list[dict[str, float | int]]:
    """Mean requests per row for each width, unaligned vs aligned, and the saving."""
    rows = []
    for w in widths:
        none = mean_row_requests(w, "none")
        aligned = mean_row_requests(w, "warp128")
        rows.append(
            {
                "width": w,
                "row_bytes": w * FLOAT_BYTES,
                "none": none,
                "warp128": aligned,
                "saving": 1.0 - aligned / none,
            }
        )
    return rows
