"""Durable, atomic file writes and names that stay inside their folder.

Every file the harness writes goes through ``atomic_write_text``: a fsynced temporary file
next to the target, a rename, and a fsync of the folder, so a reader sees the old or the new
file and a crash after return keeps the new one. ``durable_temp`` is the first half, for
writers that rename several files at one commit point (goldens).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from harness.errors import StorageError

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
TEMP_NAME = re.compile(r"^\..+\.json\.[A-Za-z0-9_]{8}$")  # durable_temp's temporary files (of .json targets)


def safe_name(text: str) -> str:
    """A name that stays inside its folder whatever the input holds."""
    s = _SAFE.sub("-", text).strip("-.")
    return s[:80] or "unnamed"


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in ``folder`` durable (a no-op where directories refuse fsync)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def durable_temp(path: Path, text: str) -> Path:
    """``text`` in a fsynced temporary file next to ``path`` (hidden, same file system)."""
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        fsync_dir(path.parent.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide goldens from the team
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return Path(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file, fsync, rename and fsync of the folder: readers see the old
    or the new file, never half of one, and a crash after return keeps the new one."""
    path = Path(path)
    tmp = durable_temp(path, text)
    try:
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise
    fsync_dir(path.parent)


@contextlib.contextmanager
def disk_errors(where: str | Path, kept: str) -> Iterator[None]:
    """An OSError inside (disk full, folder removed or read-only) becomes one StorageError line
    naming ``where`` and saying what was ``kept``."""
    try:
        yield
    except OSError as exc:
        raise disk_error(where, exc, kept) from None


def disk_error(where: str | Path, exc: OSError, kept: str) -> StorageError:
    """The one line ``disk_errors`` raises."""
    return StorageError(f"{where}: cannot write ({exc.strerror or exc}); {kept}")
