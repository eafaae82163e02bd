"""Folders a run writes into: checked before anything is generated, and the run's own report
folder, made anew for every run (two runs at once never share one)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from harness.errors import ConfigError
from harness.storage import confine
from harness.storage.atomic import readable


def check_writable(root: Path, option: str = "--report-dir", fix: str = "choose a writable folder") -> None:
    """Create ``root`` if needed; a ConfigError naming ``option`` when it cannot be written."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} {root}: cannot create ({exc.strerror}); {fix}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {root}: not writable; {fix}")


def new_report_dir(root: Path, backend: str, started: dt.datetime) -> Path:
    """A new ``run-<time>-<backend>`` folder under ``root`` (suffixed when the name is taken: the
    name need not tell backends apart, ``mkdir`` makes it unique; never a link's target)."""
    check_writable(root)
    stem = f"run-{started:%Y%m%d-%H%M%S}-{readable(backend.replace(':', '-').replace('.', '-'))}"
    for i in range(1000):
        path = root / (stem if i == 0 else f"{stem}-{i}")
        try:
            path.mkdir()  # a new folder: a link or anything else of that name is EEXIST
            return confine.inside(root, path)
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(
                f"--report-dir {root}: not writable ({exc.strerror}); choose a writable folder"
            ) from None
    raise ConfigError(f"--report-dir {root}: too many runs started this second")


def check_output_file(path: Path, option: str) -> Path:
    """A file the command will write: not a folder, in a folder that exists or can be made."""
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a folder; give a file name, e.g. {path / 'compare.html'}")
    check_writable(path.parent if str(path.parent) else Path("."), option, "give a file in a writable folder")
    return path
