"""``scripts/gpu_check.sh --dry-run``: what a device call would carry and bring back, checked here.

The device tool carries at most 64 MiB (tracked and untracked-not-ignored files, ``shared/`` and
the carried paths) and brings back at most 8 files from ``$OUT``; the GPU machine has no network.
The dry run is checked on this repository (with a carry holding the native runtime) and on small
throwaway repositories whose sizes are known to the byte.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hector.runtime import native

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
MIB = 1024 * 1024


def dry_run(root: Path, carry: Path) -> subprocess.CompletedProcess[str]:
    """Run ``root``'s ``scripts/gpu_check.sh --dry-run`` with ``carry`` as the carry folder."""
    return subprocess.run(
        ["bash", str(root / "scripts" / "gpu_check.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        env={**os.environ, "HECTOR_CARRY": str(carry)},
        timeout=120,
        check=False,
    )


def carried_bytes(stdout: str) -> int:
    """The byte count the dry run reports."""
    match = re.search(r"^carry: (\d+) bytes in \d+ files", stdout, re.M)
    assert match, stdout
    return int(match.group(1))


def git(repo: Path, *args: str) -> None:
    """Run git in ``repo`` with a throwaway identity."""
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    subprocess.run(cmd, cwd=repo, check=True, capture_output=True)


@pytest.fixture
def toy_repo(tmp_path: Path) -> Path:
    """A git repository holding the script, with files of known sizes in every git state."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "gpu_check.sh")
    (repo / ".gitignore").write_text("/ignored.bin\n/.carry/\n")
    (repo / "tracked.bin").write_bytes(b"t" * 1000)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "toy")
    (repo / "untracked.bin").write_bytes(b"u" * 500)
    (repo / "ignored.bin").write_bytes(b"i" * 7000)  # ignored: stays behind
    (repo / ".carry" / "lib").mkdir(parents=True)
    (repo / ".carry" / "lib" / "libhector_runtime.so").write_bytes(b"l" * 2000)
    return repo


def tracked_copy(dest: Path) -> Path:
    """A fresh git repository at ``dest`` holding this checkout's tracked files as they are now.

    What a user keeps beside the sources (a ``.venv`` in the clone, build folders, data) is no
    part of the project, so the project's own size is measured on this copy, not on the
    working tree.
    """
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        source = ROOT / rel
        if source.is_file() and not source.is_symlink():  # a tracked file deleted now is gone
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "copy")
    return dest


def test_this_repository_fits_the_device_call(tmp_path: Path) -> None:
    carry = tmp_path / "carry"
    (carry / "lib").mkdir(parents=True)
    shutil.copy(native.library_path(), carry / "lib" / native.LIBRARY_NAME)
    proc = dry_run(tracked_copy(tmp_path / "repo"), carry)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert carried_bytes(proc.stdout) <= 64 * MIB
    assert "out files: 2 (gpu_check.tar.gz summary.txt ) (limit 8)" in proc.stdout
    assert "network installs: none" in proc.stdout
    # the package imports from the symlink layout, with the carried runtime and without MLIR
    assert "layout: hector imports from" in proc.stdout
    assert "without MLIR" in proc.stdout


def test_carry_size_counts_what_travels_to_the_byte(toy_repo: Path) -> None:
    proc = dry_run(toy_repo, toy_repo / ".carry")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    script = (toy_repo / "scripts" / "gpu_check.sh").stat().st_size
    gitignore = (toy_repo / ".gitignore").stat().st_size
    # tracked + untracked + the carry; not the ignored file
    assert carried_bytes(proc.stdout) == script + gitignore + 1000 + 500 + 2000


def test_a_carry_over_64_mib_fails(toy_repo: Path) -> None:
    with (toy_repo / ".carry" / "bundle.bin").open("wb") as f:
        f.truncate(64 * MIB)  # sparse: costs no disk, counts its full size
    proc = dry_run(toy_repo, toy_repo / ".carry")
    assert proc.returncode == 1
    assert "PROBLEM: what would travel exceeds 64 MiB" in proc.stdout


def test_a_missing_native_runtime_fails(toy_repo: Path) -> None:
    proc = dry_run(toy_repo, toy_repo / "no-carry")
    assert proc.returncode == 1
    assert "libhector_runtime.so is missing: run scripts/build_carry.sh" in proc.stdout


def test_a_network_install_in_the_script_fails(toy_repo: Path) -> None:
    script = toy_repo / "scripts" / "gpu_check.sh"
    text = script.read_text()
    # an offline install of carried wheels is fine; one that reaches an index is not
    offline = "python3 -m pip install --no-index --target /tmp/site .whl/*.whl\n"
    script.write_text(text.replace("set -uo pipefail\n", f"set -uo pipefail\n{offline}", 1))
    assert dry_run(toy_repo, toy_repo / ".carry").returncode == 0
    script.write_text(text.replace("set -uo pipefail\n", "set -uo pipefail\npip3 install x\n", 1))
    proc = dry_run(toy_repo, toy_repo / ".carry")
    assert proc.returncode == 1
    assert "PROBLEM: this script would fetch from a network:" in proc.stdout
    assert "pip3 install x" in proc.stdout


def test_sections_not_selected_are_skipped_and_fail_nothing(tmp_path: Path) -> None:
    # GPU_CHECK_SECTIONS picks sections (a run short of device time runs only issue 14's
    # offload-bench, say); the others are SKIPPED, which fails nothing. No section here is
    # selected: the run checks only the selection and the summary (no GPU needed).
    out = tmp_path / "out"
    env = {
        **os.environ,
        "GPU_CHECK_SECTIONS": "no-such-section",
        "OUT": str(out),
        "HECTOR_CARRY": str(tmp_path / "no-carry"),
    }
    proc = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = (out / "summary.txt").read_text()
    sections = (
        "machine",
        "imports",
        "gather-tests",
        "gpu-tests",
        "offload-bench",
        "offload-models",
    )
    for section in sections:
        assert re.search(rf"^{section} +SKIPPED .*not in GPU_CHECK_SECTIONS", summary, re.M)
    assert "PASSED" not in summary
    assert "FAILED" not in summary
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.tar.gz", "summary.txt"]
