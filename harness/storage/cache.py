"""Generation cache: each batch's outputs on disk as soon as they exist.

Keyed by the engine fingerprint (every input besides the batch that can change an output:
the engine directory's files, the backend and what it reports about itself, the engine
options, the tokenizer by content, library versions and the GPU; see ``cache_key``), the
decoding settings and the batch composition (the prompts in position order), so a rerun with other tolerances or report options, or after a crash, asks the
engine only for what is missing. Engines without a directory (module:Class) have no
fingerprint and are never cached.

Each file is written atomically, so runs sharing a cache never see half a batch, whatever
kills them. Writers hold the folder's lock shared (they never wait for each other); a new
cache object takes it exclusively, without waiting, to remove temporary files that killed
runs left behind. A cache folder that cannot be written stops the cache, not the run.

A shared cache folder can hold what another user put there: below ``--cache-dir`` nothing is
read, written or removed through a symbolic link (``confine``). A link there stops the cache
(one warning naming it and the fix; report.json ``cache.reason`` says so), not the run.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import bounds
from harness.config import DecodingSettings, EngineOptions
from harness.engines.base import EngineInfo
from harness.model.report import CacheStats
from harness.storage import confine
from harness.storage.atomic import TEMP_NAME, atomic_write_text
from harness.storage.cache_key import fingerprint, key_inputs
from harness.storage.locks import file_lock, try_lock

LOCK_FILE = ".lock"


def engine_fingerprint(info: EngineInfo, options: EngineOptions | None = None) -> str | None:
    """sha256 over every input besides the batch that can change an output (``cache_key``);
    None for an engine without a directory."""
    inputs = key_inputs(info, options)
    return fingerprint(inputs) if inputs is not None else None


class GenerationCache:
    """One JSON file per batch under ``root/<fingerprint>/``, written atomically."""

    def __init__(self, root: Path | None, fingerprint: str | None, reason: str = "",
                 key: dict[str, Any] | None = None) -> None:
        self.root = root
        self.folder = root / fingerprint[:24] if root is not None and fingerprint else None
        self.fingerprint = fingerprint
        self.stats = CacheStats(folder=str(self.folder) if self.folder else None,
                                enabled=self.folder is not None,
                                reason=reason or ("on" if self.folder else "off"), key=key or {})
        self.writable = self.folder is not None
        if self.folder is not None:
            try:
                confine.inside(self._root, self.folder)
                if self.folder.is_dir():
                    self._remove_strays()
            except confine.LinkInside as exc:
                self._stop(exc)

    @property
    def _root(self) -> Path:
        assert self.root is not None
        return self.root

    def _stop(self, exc: confine.LinkInside) -> None:
        """A link inside the cache folder: no more reads or writes there, said once."""
        self.writable = False
        self.folder = None
        self.stats.enabled = False
        self.stats.reason = f"off ({exc})"
        print(f"warning: generation cache: {exc}; the run goes on without the cache",
              file=sys.stderr, flush=True)

    def _remove_strays(self) -> None:
        """Temporary files of runs killed mid-write; only when no other run is writing."""
        assert self.folder is not None
        with try_lock(self.folder / LOCK_FILE, root=self._root) as locked:
            if locked:
                for sub in confine.entries(self._root, self.folder):
                    if not sub.is_dir():
                        continue
                    for stray in confine.entries(self._root, sub):
                        if TEMP_NAME.match(stray.name):
                            confine.remove(self._root, stray, missing_ok=True)

    def _path(self, settings: DecodingSettings, prompts: Sequence[str]) -> Path:
        assert self.folder is not None
        key = hashlib.sha256(json.dumps([self.fingerprint, settings.as_dict(), list(prompts)],
                                        ensure_ascii=False).encode("utf-8")).hexdigest()
        return self.folder / key[:2] / f"{key}.json"

    def get(self, settings: DecodingSettings, prompts: Sequence[str]) -> list[str] | None:
        """The batch's outputs (best beams) when cached and intact, else None."""
        entry = self.get_entry(settings, prompts)
        return entry[0] if entry is not None else None

    def get_entry(self, settings: DecodingSettings, prompts: Sequence[str]
                  ) -> tuple[list[str], list[list[str]] | None] | None:
        """The batch's outputs and, where stored, every beam of each; None when missing."""
        if self.folder is None:
            return None
        path = self._path(settings, prompts)
        try:
            confine.inside(self._root, path)
        except confine.LinkInside as exc:
            self._stop(exc)
            return None
        try:
            stored = bounds.loads(path.read_text(encoding="utf-8"))
            texts = stored["outputs"]
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing or damaged: generate again, and overwrite
        if not isinstance(texts, list) or len(texts) != len(prompts) or not all(
                isinstance(t, str) for t in texts):
            return None
        beams = stored.get("beams")
        if not (isinstance(beams, list) and len(beams) == len(prompts) and all(
                isinstance(b, list) and all(isinstance(t, str) for t in b) for b in beams)):
            beams = None
        self.stats.batches_from_cache += 1
        self.stats.generations_from_cache += len(texts)
        return texts, beams

    def put(self, settings: DecodingSettings, prompts: Sequence[str], texts: Sequence[str],
            beams: Sequence[Sequence[str]] | None = None) -> None:
        self.stats.batches_generated += 1
        if self.folder is None or not self.writable:
            return
        entry: dict[str, Any] = {"outputs": list(texts)}
        if beams is not None:
            entry["beams"] = [list(b) for b in beams]
        try:
            with file_lock(self.folder / LOCK_FILE, purpose="writing the generation cache",
                           shared=True, root=self._root):
                atomic_write_text(self._path(settings, prompts),
                                  json.dumps(entry, ensure_ascii=False), root=self._root)
        except confine.LinkInside as exc:
            self._stop(exc)
        except OSError as exc:  # disk full, folder made read-only: keep the run going
            self.writable = False
            self.stats.reason = f"on, writing stopped ({exc.strerror or exc}) at {self.folder}"
            print(f"warning: generation cache {self.folder}: cannot write ({exc.strerror or exc}); "
                  "the run goes on without storing batches", file=sys.stderr, flush=True)
