"""Durable, atomic file writes and names that stay inside their folder.

Every file the harness writes goes through ``atomic_write_text``: a fsynced temporary file
next to the target, a rename, and a fsync of the folder, so a reader sees the old or the new
file and a crash after return keeps the new one. ``durable_temp`` is the first half, for
writers that rename several files at one commit point (goldens). Both take the folder the
file belongs to (``root``) and never write through a symbolic link below it (``confine``).

``safe_name`` turns a name (a dataset's) into a file name that no other name gets;
``readable`` is the same text for people, for names made unique another way.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from harness.errors import StorageError
from harness.storage import confine

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_KEPT = re.compile(r"[a-z0-9_][a-z0-9_.-]{0,78}[a-z0-9_]|[a-z0-9_]")  # names safe_name keeps as they are
_HASHED = re.compile(r"-h[0-9a-f]{16}$")  # how every other name ends
TEMP_NAME = re.compile(r"^\..+\.json\.[A-Za-z0-9_]{8}$")  # durable_temp's temporary files (of .json targets)


def readable(text: str, limit: int = 80) -> str:
    """``text`` as a name that stays inside its folder, for people to read: characters other
    than letters, digits and ``_.-`` become ``-``, cut at ``limit``. Two texts can share it
    (``news a``, ``news-a``): only for names made unique otherwise (a run folder's suffix, an
    identity's hash)."""
    s = _SAFE.sub("-", text).strip("-.")
    return s[:limit] or "unnamed"


def safe_name(text: str) -> str:
    """A file name for ``text`` that stays inside its folder and that no other text gets, on
    a case-insensitive file system too: ``text`` itself when it is at most 80 lowercase
    letters, digits and ``_.-`` (not at either end: ``_`` aside) and does not end like the
    other kind; else ``readable(text)`` cut to 60, ``-h`` and the first 16 hex digits of the
    sha256 of ``text`` exactly (``News a.jsonl`` -> ``News-a-h3f1c...``)."""
    if _KEPT.fullmatch(text) and not _HASHED.search(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable(text, 60)}-h{digest}"


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


def durable_temp(path: Path, text: str, *, root: Path | None = None) -> Path:
    """``text`` in a fsynced temporary file next to ``path`` (hidden, same file system),
    inside ``root`` (default: ``path``'s folder) and never through a link below it."""
    root = path.parent if root is None else Path(root)
    confine.inside(root, path)
    if not path.parent.is_dir():
        confine.make_dirs(root, path.parent)
        fsync_dir(path.parent.parent)
    # mkstemp creates with O_EXCL | O_NOFOLLOW: a new file, never a link's target
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


def atomic_write_text(path: Path, text: str, *, root: Path | None = None) -> None:
    """Write via a temporary file, fsync, rename and fsync of the folder: readers see the old
    or the new file, never half of one, and a crash after return keeps the new one. Inside
    ``root`` (default: ``path``'s folder): a link below it is refused, never written through
    or replaced."""
    path = Path(path)
    root = path.parent if root is None else Path(root)
    tmp = durable_temp(path, text, root=root)
    try:
        confine.replace(root, tmp, path)
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
