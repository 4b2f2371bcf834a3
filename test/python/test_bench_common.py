"""The benchmarks' shared meters (``hector.bench._common``)."""

from __future__ import annotations

import mmap

from hector.bench._common import KernelTime


def _fault_in(nbytes: int) -> None:
    """Write every page of a fresh anonymous mapping of ``nbytes`` (one minor fault each)."""
    with mmap.mmap(-1, nbytes) as region:
        for offset in range(0, nbytes, mmap.PAGESIZE):
            region[offset] = 1


def test_kernel_time_counts_the_page_faults_of_each_unit_of_work():
    kernel = KernelTime()
    kernel.start()
    for _ in range(2):
        _fault_in(16 << 20)  # 4096 pages of 4 KiB each time (fewer if huge pages served it)
    per = kernel.per(2)
    assert set(per) == {
        "minor_faults",
        "system_ms",
        "user_ms",
        "thread_minor_faults",
        "thread_system_ms",
        "thread_user_ms",
    }
    pages = (16 << 20) // mmap.PAGESIZE
    assert per["thread_minor_faults"] is not None  # Linux: the calling thread's own figures
    # This thread faulted them in; the process counts them as well (and whatever else ran).
    assert per["thread_minor_faults"] >= 0.9 * pages
    assert per["minor_faults"] >= per["thread_minor_faults"]
    assert per["thread_system_ms"] >= 0
    assert per["user_ms"] >= 0
    nothing = KernelTime()
    nothing.start()
    assert nothing.per(1)["thread_minor_faults"] < 0.1 * pages  # a fresh start counts anew
