"""An inter-process lock on a file (``fcntl.flock``), saying who holds it while waiting.

Two runs at once may share a goldens folder and a generation cache. Writes to either take
the folder's lock, so one run's goldens commit or cache clean-up never interleaves with
another's. The lock file holds the holder's pid, only for the waiting message; it is never
deleted (deleting a lock file races with a process that just opened it). The kernel drops
a flock when its holder dies, SIGKILL included, so a killed run never leaves a stale lock.
The lock file is opened inside its folder (``root``) never through a symbolic link
(``confine``): a committed ``goldens/.lock`` made a link would otherwise have its target
truncated to the pid. On systems without ``fcntl`` (Windows) the lock does nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.outside import say as outside_say
from harness.storage import confine

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    # no locking there: the module object is absent, and every lock is a no-op
    fcntl = None  # type: ignore[assignment]  # a module where it exists; None marks it absent


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "another process"


def _open(path: Path, root: Path | None) -> int:
    root = path.parent if root is None else Path(root)
    confine.make_dirs(root, path.parent)
    return confine.open_fd(root, path, os.O_RDWR | os.O_CREAT)


@contextlib.contextmanager
def file_lock(
    path: Path,
    *,
    purpose: str,
    shared: bool = False,
    say: Callable[[str], None] | None = None,
    root: Path | None = None,
) -> Iterator[None]:
    """Hold a lock on ``path`` (created if missing) inside ``root`` (default: its folder),
    exclusive unless ``shared``; blocks until it is free, saying once "waiting for the lock on
    PATH held by pid N (purpose)"."""
    path = Path(path)
    fd = _open(path, root)
    try:
        if fcntl is not None:
            mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                (say or outside_say)(f"waiting for the lock on {path} held by {_holder(fd)} ({purpose})")
                fcntl.flock(fd, mode)
            if not shared:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


@contextlib.contextmanager
def try_lock(path: Path, *, root: Path | None = None) -> Iterator[bool]:
    """An exclusive lock on ``path`` (inside ``root``, default its folder) if it is free right
    now; yields whether it was taken."""
    fd = _open(Path(path), root)
    try:
        if fcntl is None:
            yield False
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield True
    finally:
        os.close(fd)
