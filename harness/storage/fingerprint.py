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


def weights_identity(paths: list[Path]) -> str:
    """A model's identity from its weight files: the file's sha256 when there is one file
    (so an engine that copies the weights unchanged shares the model's goldens), else one
    sha256 over the files' hashes in name order."""
    if len(paths) == 1:
        return f"sha256:{file_sha256(paths[0])}"
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(file_sha256(p).encode("ascii"))
    return f"sha256:{h.hexdigest()}"
