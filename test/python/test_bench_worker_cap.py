"""A capped benchmark worker's budget is the measured work's alone (issue 39): neither the
roofline's reference measurements nor PyTorch's worker threads (one stack reservation each, as
many as the machine has cores) count against the address-space cap."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

REFERENCES_UNDER_A_CAP = """
import torch
from hector_bench import _common, roofline

_common.limit_address_space(32 << 20)  # less than the 2 x 64 MiB reference copy
profile = roofline.measure([], 1)
assert profile["copy_gbps"] > 0, profile
import resource
soft, _ = resource.getrlimit(resource.RLIMIT_AS)
assert soft != resource.RLIM_INFINITY  # the cap is back after the references
print("ok")
"""

THREADS_UNDER_A_CAP = """
import torch

torch.set_num_threads(8)  # as on an 8-core machine, whatever this one has
from hector_bench import gnn_worker

gnn_worker.isolate(16 << 20)  # a worker's set-up with a 16 MiB cap: less than 7 x 8 MiB of stacks
x = torch.zeros(8 * 65536)
x.add_(1.0)  # a parallel op on all 8 threads
assert float(x.sum()) == 8 * 65536
print("ok")
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MALLOC_ARENA_MAX": "1"},  # as run_worker sets it
    )


def test_roofline_references_run_outside_the_worker_cap() -> None:
    r = _run(REFERENCES_UNDER_A_CAP)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "ok"


def test_torch_threads_are_started_before_the_worker_cap() -> None:
    r = _run(THREADS_UNDER_A_CAP)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "ok"


def test_a_record_is_never_written_through_a_link_at_a_temporary_name(tmp_path) -> None:
    """write_json's temporary file has a fresh name: a link planted at the old fixed name
    (``<record>.tmp``) in a shared folder is left alone, and so is what it points to."""
    from hector_bench import _common

    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / "rec.json.tmp")
    _common.write_json(tmp_path / "rec.json", {"a": 1})
    assert victim.read_text() == "precious"
    assert (tmp_path / "rec.json").read_text() == '{\n  "a": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.json", "rec.json.tmp", "victim"]
    mode = (tmp_path / "rec.json").stat().st_mode & 0o777
    assert mode == 0o666 & ~_common._umask()
