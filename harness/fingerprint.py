"""Content hashes of files, used for engine identity and report provenance."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (memoized per path, size and mtime)."""
    st = Path(path).stat()
    return _sha256(str(path), st.st_size, st.st_mtime_ns)


def files_sha256(paths: list[Path]) -> str:
    """One sha256 over several files, by name and content, in sorted order."""
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode("utf-8"))
        h.update(file_sha256(p).encode("ascii"))
    return h.hexdigest()
