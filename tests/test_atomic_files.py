"""Atomic, durable file writes and the inter-process lock (services.atomic_files)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from services import atomic_files
from services.atomic_files import (
    atomic_path,
    atomic_write_bytes,
    atomic_write_text,
    fsync_dir,
    locked,
    place_file,
)
from services.dataset import shards


def _fsync_failing_on_folders(code: int):
    """os.fsync that fails with `code` on folders and works on files."""
    real = os.fsync

    def fsync(fd: int) -> None:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(code, os.strerror(code))
        real(fd)
    return fsync


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"old")
    atomic_write_bytes(b"new content", path)
    assert path.read_bytes() == b"new content"
    atomic_write_text("é\n", tmp_path / "t.txt")
    assert (tmp_path / "t.txt").read_text(encoding="utf-8") == "é\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin", "t.txt"]


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOTSUP])
def test_a_folder_fsync_the_file_system_does_not_support_is_skipped(
        tmp_path: Path, monkeypatch, code: int) -> None:
    monkeypatch.setattr(os, "fsync", _fsync_failing_on_folders(code))
    fsync_dir(tmp_path)
    atomic_write_bytes(b"x", tmp_path / "f")
    assert (tmp_path / "f").read_bytes() == b"x"


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
def test_a_failed_folder_fsync_is_raised_by_every_writer(tmp_path: Path, monkeypatch,
                                                         code: int) -> None:
    """The rename may not survive a crash: the dataset writer must not report success."""
    monkeypatch.setattr(os, "fsync", _fsync_failing_on_folders(code))
    with pytest.raises(OSError) as caught:
        fsync_dir(tmp_path)
    assert caught.value.errno == code
    tmp = tmp_path / ".f.tmp"
    tmp.write_bytes(b"x")
    with pytest.raises(OSError):
        place_file(tmp, tmp_path / "f")
    with pytest.raises(OSError):
        shards.atomic_write_json({"a": 1}, tmp_path / "manifest.json")


def test_a_failed_file_fsync_is_raised_and_the_target_untouched(tmp_path: Path,
                                                                monkeypatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")
    path = tmp_path / "f"
    path.write_bytes(b"old")
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError):
        atomic_write_bytes(b"new", path)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_the_lock_excludes_a_second_holder_until_released(tmp_path: Path) -> None:
    lock_file = tmp_path / ".lock"
    with locked(tmp_path):  # a folder is locked itself
        with (pytest.raises(TimeoutError, match="the other writer holds"),
              locked(tmp_path, timeout_s=0, holder="the other writer")):
            pass
        with (locked(lock_file, timeout_s=0),  # another path: another lock
              pytest.raises(TimeoutError), locked(lock_file, timeout_s=0)):
            pass
    with locked(tmp_path, timeout_s=0):
        pass
    assert lock_file.exists()


def test_temporary_names_are_hidden_and_unique(tmp_path: Path) -> None:
    names = {atomic_files.temporary_name(tmp_path / "x.parquet") for _ in range(100)}
    assert len(names) == 100
    assert all(n.parent == tmp_path and n.name.startswith(".x.parquet.")
               and n.name.endswith(".tmp") for n in names)
