"""Per-user private directories (hector.runtime.private_dir): what is created, what is refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hector.runtime.private_dir import (
    UnsafeDirectoryError,
    check_private_dir,
    open_private_file,
    private_dir,
    user_cache_dir,
    write_private_file,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_missing_directory_is_created_0700(tmp_path: Path) -> None:
    d = private_dir(tmp_path / "cache")
    assert d.is_dir()
    assert _mode(d) == 0o700


def test_an_existing_private_directory_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir(mode=0o700)
    assert private_dir(tmp_path / "d") == tmp_path / "d"


def test_a_directory_writable_by_others_is_refused_not_repaired(tmp_path: Path) -> None:
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(UnsafeDirectoryError, match="writable by group or others"):
        private_dir(d)
    assert _mode(d) == 0o777


def test_a_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    # chown to another user needs root: CI and developers' machines run as root.
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 12345, 12345)
    with pytest.raises(UnsafeDirectoryError, match="owned by uid 12345"):
        private_dir(d)


def test_a_symlink_to_a_private_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UnsafeDirectoryError, match="symbolic link"):
        private_dir(tmp_path / "link")


def test_a_file_in_place_of_the_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(UnsafeDirectoryError, match="not a directory"):
        check_private_dir(tmp_path / "f")


def test_a_nul_byte_in_the_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafeDirectoryError, match="NUL"):
        private_dir(f"{tmp_path}/a\0b")


def test_a_planted_link_inside_is_not_opened(tmp_path: Path) -> None:
    d = private_dir(tmp_path / "d")
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (d / "data.npy").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic links"):
        open_private_file(d, "data.npy", os.O_WRONLY | os.O_TRUNC)
    assert victim.read_text() == "keep"


def test_write_replaces_a_planted_link_without_writing_through_it(tmp_path: Path) -> None:
    d = private_dir(tmp_path / "d")
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (d / "data.npy").symlink_to(victim)
    write_private_file(d, "data.npy", b"fresh")
    assert victim.read_text() == "keep"
    assert not (d / "data.npy").is_symlink()
    assert (d / "data.npy").read_bytes() == b"fresh"
    assert _mode(d / "data.npy") == 0o600
    assert sorted(p.name for p in d.iterdir()) == ["data.npy"]  # no temporary left behind


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\0b"])
def test_only_plain_file_names_are_opened(tmp_path: Path, name: str) -> None:
    d = private_dir(tmp_path / "d")
    with pytest.raises(ValueError, match="plain file name"):
        open_private_file(d, name, os.O_RDONLY)


def test_user_cache_dir_honours_hector_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HECTOR_CACHE_DIR", str(tmp_path / "hc"))
    d = user_cache_dir("minibatch")
    assert d == tmp_path / "hc" / "minibatch"
    assert _mode(d) == 0o700
    assert _mode(d.parent) == 0o700


def test_user_cache_dir_refuses_a_shared_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("HECTOR_CACHE_DIR", str(shared))
    with pytest.raises(UnsafeDirectoryError):
        user_cache_dir("minibatch")
