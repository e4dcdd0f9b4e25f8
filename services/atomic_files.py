"""Files that appear whole or not at all, and an exclusive lock between processes.

Every writer of a file another process may read while it is written (dataset shards and
manifests, intermediate Parquet files, model versions, serving records) writes it under a
temporary name in the same folder, fsyncs it, renames it over the final name and fsyncs the
folder: a reader sees the old file or the new one, never part of one, and after the folder's
fsync the new name survives a power cut.

Errors: a failed write, fsync of the file or rename is raised (the file is not where it
should be, or not durable). A folder fsync that the file system does not support (EINVAL,
ENOTSUP: some network and FUSE file systems) is skipped, since the rename is atomic there
all the same; any other error of it (EIO, ENOSPC) is raised, because the rename may not
survive a crash.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

# folder fsync errors that mean "not supported here", not "failed"
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF,
                          errno.EISDIR, errno.EACCES, errno.EPERM})
_LOCK_POLL_S = 0.1


def fsync_dir(path: Path) -> None:
    """Make the folder's entries (a rename into it) durable; see the module on errors."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        if exc.errno in _UNSUPPORTED:
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Make a written file's content durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temporary_name(path: Path) -> Path:
    """A hidden name next to `path`, unique per process and call (writers never collide)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def place_file(tmp: Path, path: Path) -> None:
    """Make the finished temporary file `tmp` the file `path`: fsync it, rename it, fsync the
    folder."""
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path to write `path`'s content to; when the block ends without an error
    it becomes `path` (`place_file`), and on any error it is removed, `path` untouched."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        yield tmp
        place_file(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(data: bytes, path: Path) -> None:
    """Write `data` to `path` atomically and durably."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(text: str, path: Path) -> None:
    """Write `text` (UTF-8) to `path` atomically and durably."""
    atomic_write_bytes(text.encode("utf-8"), path)


@contextlib.contextmanager
def locked(path: Path, timeout_s: float | None = None, holder: str = "another process",
           on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` for the block: a folder is locked itself, any
    other path is a lock file, created if missing. Waits for the lock without limit when
    `timeout_s` is None, else raises TimeoutError naming `holder` after that many seconds;
    `on_wait` is called once when the lock is not free at once (e.g. to log the wait).
    The lock goes with the file descriptor: a killed holder releases it."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_DIRECTORY if path.is_dir() else os.O_RDWR | os.O_CREAT
    fd = os.open(path, flags, 0o644)
    try:
        if on_wait is not None and not _flock_now(fd):
            on_wait()
        if timeout_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            _flock_within(fd, path, timeout_s, holder)
        yield
    finally:
        os.close(fd)  # releases the lock


def _flock_now(fd: int) -> bool:
    """Take the lock if it is free (True), else False without waiting."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True


def _flock_within(fd: int, path: Path, timeout_s: float, holder: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not _flock_now(fd):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{holder} holds {path} (waited {timeout_s:.0f} s)")
        time.sleep(_LOCK_POLL_S)
