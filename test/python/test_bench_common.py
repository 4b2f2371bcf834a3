"""The benchmarks' shared meters (``hector_bench._common``)."""

from __future__ import annotations

import mmap
import subprocess
import sys

import pytest

from hector_bench._common import KernelTime


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
        "others_cpu_ms",
        "host_steal_ms",
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


def test_kernel_time_says_what_else_ran_on_the_machine():
    # Another process spinning for 0.4 s while this one sleeps: its CPU time is the machine's
    # "others", and this process's own stays near zero.
    kernel = KernelTime()
    kernel.start()
    spin = "import time\nend = time.perf_counter() + 0.4\nwhile time.perf_counter() < end: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    per = kernel.per(1)
    assert per["others_cpu_ms"] >= 300  # ticks of 10 ms: 400 ms spun, more if anything else ran
    assert per["user_ms"] < 100
    assert per["host_steal_ms"] >= 0
    assert KernelTime().per(1)["others_cpu_ms"] is not None  # /proc/stat read on Linux


def test_round_bootstrap_brackets_the_figure_and_reproduces():
    from hector_bench._common import round_bootstrap

    rounds = [0.02, 0.05, 0.08, 0.30]  # one round far off: the host drifted

    def mean_of(drawn):
        return sum(rounds[i] for i in drawn) / len(drawn)

    low, high = round_bootstrap(len(rounds), mean_of)
    assert low <= sum(rounds) / len(rounds) <= high
    assert 0.02 <= low < 0.08
    assert 0.1 < high <= 0.30  # the off round widens it upward
    assert round_bootstrap(len(rounds), mean_of) == (low, high)  # seeded: a record reproduces
    narrow = round_bootstrap(len(rounds), mean_of, level=0.5)
    assert low <= narrow[0] <= narrow[1] <= high
    assert round_bootstrap(1, mean_of) is None  # one round: no interval
    assert round_bootstrap(3, lambda drawn: None) is None  # undefined for every draw
    same = round_bootstrap(3, lambda drawn: 0.1)
    assert same == pytest.approx((0.1, 0.1))
