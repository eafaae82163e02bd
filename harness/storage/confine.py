"""Every file the harness writes, renames, deletes or locks stays inside the folder it belongs to.

The harness writes into folders: ``--goldens-dir``, ``--report-dir`` (and the run folder it
makes there), ``--cache-dir``, ``merge --output``, the folder of ``compare --html``'s page,
and its own cache folder (the bundled engine, calibration engines). The folder itself is the
user's choice and may be a symbolic link. Below it nothing is followed: goldens are
committed, so a pull request can plant a link there, and a shared cache folder can hold
another user's. Every operation below checks its paths first (``inside``): every component
between the folder and the file that exists must be a real folder or file, not a symbolic
link, and the path must resolve inside the folder's real path; files are opened with
``O_NOFOLLOW`` (and ``O_EXCL`` where they are new), so a link in the last place is refused
even when it appears after the check. A link is never followed, replaced or removed: the
operation stops with ``LinkInside``, one line naming the link, where it points and the fix.

The writers of harness/ (``atomic``, ``locks``, ``goldens``, ``cache``, ``generations``,
``folders``, the emulator's builds) take their paths through this module and no other way.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.errors import StorageError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class LinkInside(StorageError):
    """A symbolic link (or a path leading elsewhere) inside a folder the harness writes."""


def _link_error(root: Path, link: Path) -> LinkInside:
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    return LinkInside(
        f"{link}: a symbolic link (to {target}) inside {root}, a folder the harness "
        "writes; it never writes, renames or deletes through a link there: replace "
        "the link with a real folder or file, or remove it, and rerun"
    )


def _within(root: Path, path: Path) -> tuple[str, ...]:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        parts = ("..",)
    if ".." in parts:
        raise LinkInside(
            f"{path}: not inside {root}, the folder the harness writes it in; nothing was written"
        )
    return parts


def inside(root: Path, path: Path) -> Path:
    """``path`` (under ``root``) when no component below ``root`` is a symbolic link and it
    resolves inside root's real path; ``LinkInside`` otherwise. Missing components are fine:
    they are made by ``make_dirs`` or the open that creates them."""
    root, path = Path(root), Path(path)
    current = root
    for part in _within(root, path):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            break
        if stat.S_ISLNK(mode):
            raise _link_error(root, current)
    real_root = os.path.realpath(root)
    resolved = os.path.realpath(path)
    if resolved != real_root and not resolved.startswith(real_root.rstrip(os.sep) + os.sep):
        raise LinkInside(
            f"{path}: resolves to {resolved}, outside {root}, the folder the harness "
            "writes it in; nothing was written"
        )
    return path


def make_dirs(root: Path, folder: Path) -> Path:
    """``folder`` and its missing parents below ``root`` (``root`` too, when missing: the user's
    folder), never through a link."""
    root, folder = Path(root), Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    current = root
    for part in _within(root, folder):
        current = current / part
        try:
            os.mkdir(current)  # never follows a link in the last place: EEXIST
        except FileExistsError:
            inside(root, current)
            if not current.is_dir():
                raise
    return folder


def open_fd(root: Path, path: Path, flags: int, mode: int = 0o666) -> int:
    """``os.open`` of a regular file inside ``root``, never through a link."""
    inside(root, path)
    try:
        fd = os.open(path, flags | NOFOLLOW | CLOEXEC, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise _link_error(Path(root), Path(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LinkInside(
            f"{path}: not a regular file, inside {root}, a folder the harness writes; remove it and rerun"
        )
    return fd


def opener(root: Path) -> Callable[[str, int], int]:
    """An ``opener`` for the built-in ``open`` of a file inside ``root``: never through a link
    (``open(path, "ab", opener=confine.opener(root))``)."""
    return lambda path, flags: open_fd(root, Path(path), flags)


def replace(root: Path, src: Path, dst: Path) -> None:
    """``os.replace`` of two paths inside ``root``; a link at either is refused, not replaced."""
    inside(root, src)
    inside(root, dst)
    os.replace(src, dst)


def remove(root: Path, path: Path, *, missing_ok: bool = False) -> None:
    """Remove a file inside ``root``; a link there is refused, not removed."""
    inside(root, path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise


def entries(root: Path, folder: Path) -> Iterator[Path]:
    """What ``folder`` (inside ``root``) holds; ``LinkInside`` at the first symbolic link, so a
    scan that goes on into the folders it lists never leaves ``root``."""
    inside(root, folder)
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        path = Path(folder) / name
        if os.path.islink(path):
            raise _link_error(Path(root), path)
        yield path
