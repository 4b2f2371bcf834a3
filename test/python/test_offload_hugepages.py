"""Huge pages for PyTorch's CPU allocations: the kernel's mode, and whether they took."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from hector import offload
from hector.runtime import hugepages

_PROBE = textwrap.dedent(
    """
    import json, sys
    import torch
    from hector.runtime import hugepages
    if sys.argv[1] == "late":
        torch.ones(8)  # PyTorch reads the switch at its first CPU allocation
    print(json.dumps([hugepages.enable_huge_pages(), hugepages.huge_page_mode()]))
    """
)


def _fresh_process(when: str) -> tuple[bool, str]:
    env = {k: v for k, v in os.environ.items() if k != hugepages.THP_ENV}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, when], capture_output=True, text=True, env=env, check=True
    )
    enabled, mode = json.loads(out.stdout.strip().splitlines()[-1])
    return enabled, mode


def test_enabling_before_the_first_allocation_takes_and_after_it_does_not():
    enabled, mode = _fresh_process("early")
    assert enabled is (mode in ("always", "madvise"))
    late, mode = _fresh_process("late")
    assert late is (mode == "always")  # "madvise": PyTorch no longer marks its blocks


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never\n", "always"),
        ("always madvise [never]\n", "never"),
        ("garbled\n", "unavailable"),
        (None, "unavailable"),
    ],
)
def test_the_kernels_mode_is_read(monkeypatch, tmp_path, text, mode):
    setting = tmp_path / "enabled"
    if text is not None:
        setting.write_text(text)
    monkeypatch.setattr(hugepages, "_THP_ENABLED", str(setting))
    assert hugepages.huge_page_mode() == mode
    if mode in ("never", "unavailable"):
        assert hugepages.huge_pages_in_effect() is False


@pytest.fixture
def madvise_without_huge_pages(monkeypatch):
    """A kernel in "madvise" mode and a process PyTorch did not give huge pages to."""
    monkeypatch.setattr(hugepages, "huge_page_mode", lambda: "madvise")
    monkeypatch.setattr(hugepages, "huge_pages_in_effect", lambda: False)


def test_huge_pages_are_advised_only_for_activations_they_would_back(
    madvise_without_huge_pages, monkeypatch
):
    advice = hugepages.huge_pages_advice(12 << 20)
    assert advice is not None
    assert "12 MiB" in advice
    assert "enable_huge_pages()" in advice
    assert hugepages.THP_ENV in advice
    # Under PyTorch's 2 MiB threshold its allocator would not ask for them.
    assert hugepages.huge_pages_advice(hugepages.HUGE_PAGE_ALLOC_BYTES - 1) is None
    assert hugepages.huge_pages_advice(None) is None
    monkeypatch.setattr(hugepages, "huge_pages_in_effect", lambda: True)
    assert hugepages.huge_pages_advice(12 << 20) is None  # already has them
    for mode in ("always", "never", "unavailable"):
        monkeypatch.setattr(hugepages, "huge_page_mode", lambda mode=mode: mode)
        assert hugepages.huge_pages_advice(12 << 20) is None


def _train_mlp(rows: int, root: str) -> offload.TensorCache:
    """Three adaptive steps of an MLP whose activations are ``rows`` x 1024 floats."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)
    )
    wrapped = offload(model, "adaptive", root=root, warmup_steps=0)
    x = torch.randn(rows, 1024)
    for _ in range(3):
        wrapped(x).square().mean().backward()
    wrapped.close()
    return wrapped.cache


def test_an_adaptive_cpu_offload_advises_huge_pages_for_large_activations(
    madvise_without_huge_pages, tmp_path
):
    with pytest.warns(offload.HugePagesAdvice, match="4 MiB"):
        cache = _train_mlp(1024, str(tmp_path / "large"))
    assert "enable_huge_pages()" in cache.stats()["huge_pages_advice"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", offload.HugePagesAdvice)
        small = _train_mlp(64, str(tmp_path / "small"))  # 256 KiB activations
    assert small.plan is not None
    assert small.stats()["huge_pages_advice"] is None


_NUMPY_MARKED = textwrap.dedent(
    """
    import ctypes, json, sys
    import numpy as np
    import torch
    from hector.runtime import hugepages
    from hector.offload.plan import measure_store_bandwidth
    from hector.runtime.offload import TensorStore

    def marked_bytes():
        total, size = 0, 0
        for line in open("/proc/self/smaps"):
            head = line.split(maxsplit=1)[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                size = hi - lo
            elif line.startswith("VmFlags:") and " hg" in line:
                total += size
        return total

    # glibc as training leaves it: blocks under 32 MiB come from the heap (its largest
    # dynamic mmap threshold), and freed heap memory is not trimmed away under us.
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    if sys.argv[1] == "probe":
        # NumPy marks its arrays of 4 MiB or more for huge pages, and the heap keeps the mark.
        marked = [np.ones(4 << 20, dtype=np.uint8) for _ in range(8)]
        fence = torch.ones(1 << 20, dtype=torch.uint8)  # keeps them inside the heap
        del marked
        # Carve the freed arrays' start off, so that what comes next starts inside a mark.
        shims = [torch.empty(256 << 10, dtype=torch.uint8) for _ in range(8)]
        print(json.dumps([marked_bytes(), hugepages.huge_page_mode(),
                          hugepages.huge_pages_in_effect()]))
    else:
        before = marked_bytes()
        with TensorStore(root=sys.argv[2]) as store:
            measure_store_bandwidth(store, nbytes=32 << 20, pieces=4)
        print(json.dumps([before, marked_bytes()]))
    """
)


def _numpy_marked(what: str, root: str) -> list:
    env = {k: v for k, v in os.environ.items() if k != hugepages.THP_ENV}
    out = subprocess.run(
        [sys.executable, "-c", _NUMPY_MARKED, what, root],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_memory_numpy_marked_is_not_taken_for_pytorchs_huge_pages(tmp_path):
    marked, mode, in_effect = _numpy_marked("probe", str(tmp_path))
    # NumPy marks its 32 MiB buffer, less what its alignment leaves outside (a page or so).
    assert (marked >= 30 << 20) is (mode in ("madvise", "always"))
    assert in_effect is (mode == "always")  # PyTorch was never asked for huge pages here


def test_the_store_bandwidth_probe_marks_no_memory_for_huge_pages(tmp_path):
    # It ran in every adaptive process, before the plan: memory it marked would give the
    # training that reuses it huge pages the process never asked for.
    before, after = _numpy_marked("store", str(tmp_path))
    assert after == before
