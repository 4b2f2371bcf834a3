"""``hector bench offload-store``: each I/O backend of the tensor store in a fresh process of
its own, a record with every round and the medians; a system that cannot run is one clean
error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hector.tools.cli import main


def test_every_backend_is_measured_into_one_record(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    record = tmp_path / "store.json"
    argv = ["bench", "offload-store", "--mib", "1", "--rounds", "1", "--root", str(root)]
    assert main([*argv, "--json", str(record)]) == 0
    r = json.loads(record.read_text())
    assert r["benchmark"] == "offload-store"
    assert set(r["median"]) == {"io_uring", "threads"}
    for system, rounds in r["rounds_records"].items():
        (one,) = rounds
        assert one["system"] == system
        assert one["stats"]["bytes_written"] == one["stats"]["bytes_read"] > 0
        for workload in ("raw", "tensors_in_phase", "tensors_torch_phase"):
            assert r["median"][system][workload]["write_MBps"] > 0
    assert list(root.iterdir()) == []  # every store removed its directory


def test_an_unsafe_root_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    argv = ["bench", "offload-store", "--mib", "1", "--rounds", "1", "--root", str(root)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "error: system io_uring: " in err[0]
    assert "writable by group or others" in err[0]
