"""Huge pages for PyTorch's CPU allocations: the kernel's mode, and whether they took."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from hector.offload import hugepages

_PROBE = textwrap.dedent(
    """
    import json, sys
    import torch
    from hector.offload import hugepages
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
