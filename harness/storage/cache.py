"""Generation cache: each batch's outputs on disk as soon as they exist.

Keyed by the engine fingerprint (every input besides the batch that can change an output:
the engine directory's files, the engine's code, the backend and what it reports about
itself, the engine options, the tokenizer by content, library versions and the GPU; see
``cache_key``), the decoding settings and the batch composition (the prompts in position
order), so a rerun with other tolerances or report options, or after a crash, asks the
engine only for what is missing. Engines without a directory (module:Class) have no
fingerprint and are never cached.

Each entry says whose it is and what it held when written: the full fingerprint, the batch's
key (fingerprint, settings, prompts) and a sha256 over both and the outputs. An entry is
used only when all three still match; one that does not (edited by hand, copied from another
batch or engine, written by an older harness, damaged) is a miss: generated again,
overwritten, and counted in the report (``batches_rejected``). The sha256 is not keyed: it
catches edits and mix-ups, not someone who recomputes it (docs/reliability.md).

A beam width's scheduled passes (``harness.stages.schedules``) are kept the same way, one entry
per beam width, keyed by the fingerprint, the settings and what the passes send (the schedules,
the prompts in the order each sends them, their waves and pacing, the arrival loop's code), so a
rerun replays what the engine did in flight (``get_passes``/``put_passes``); what an entry
holds is the stage's to read.

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
from collections.abc import Sequence
from pathlib import Path

from harness import bounds
from harness.config import DecodingSettings, EngineOptions
from harness.model.engine import EngineInfo
from harness.model.json import Json, JsonObject
from harness.model.report import CacheStats
from harness.outside import say
from harness.storage import confine
from harness.storage.atomic import TEMP_NAME, atomic_write_text
from harness.storage.cache_key import fingerprint, key_inputs
from harness.storage.locks import file_lock, try_lock

LOCK_FILE = ".lock"


FORMAT = 2  # 2: entries carry their fingerprint, batch key and content sha256


def engine_fingerprint(
    info: EngineInfo, options: EngineOptions | None = None, code: JsonObject | None = None
) -> str | None:
    """sha256 over every input besides the batch that can change an output (``cache_key``;
    ``code``: the engine's ``engine_code``); None for an engine without a directory."""
    inputs = key_inputs(info, options, code)
    return fingerprint(inputs) if inputs is not None else None


def _texts(value: Json, size: int | None = None) -> list[str] | None:
    """A JSON list of texts (of ``size`` texts, when given); None for anything else."""
    if not isinstance(value, list) or (size is not None and len(value) != size):
        return None
    texts = [t for t in value if isinstance(t, str)]
    return texts if len(texts) == len(value) else None


def _outputs(outputs: Json, beams: Json, size: int) -> tuple[list[str], list[list[str]] | None] | None:
    """A batch entry's outputs and beams when they are ``size`` texts (and rows of texts)."""
    texts = _texts(outputs, size)
    if texts is None:
        return None
    if beams is None:
        return texts, None
    kept = [_texts(b) for b in beams] if isinstance(beams, list) and len(beams) == size else [None]
    rows = [b for b in kept if b is not None]
    return (texts, rows) if len(rows) == len(kept) else None


def _content_sha256(key: str, texts: Json, beams: Json) -> str:
    """sha256 of what an entry holds, bound to the batch it belongs to."""
    body = json.dumps([key, texts, beams], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


class GenerationCache:
    """One JSON file per batch under ``root/<fingerprint>/``, written atomically."""

    def __init__(
        self, root: Path | None, fingerprint: str | None, reason: str = "", key: JsonObject | None = None
    ) -> None:
        self.root = root
        self.folder = root / fingerprint[:24] if root is not None and fingerprint else None
        self.fingerprint = fingerprint
        self.said = reason or ("on" if self.folder else "off")  # the reason, before rejects
        self.stats = CacheStats(
            folder=str(self.folder) if self.folder else None,
            enabled=self.folder is not None,
            reason=self.said,
            key=key or {},
        )
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
        self.said = f"off ({exc})"
        self._say()
        say(f"warning: generation cache: {exc}; the run goes on without the cache")

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

    def _key(self, settings: DecodingSettings, what: Json) -> str:
        """An entry's key: a sha256 of the fingerprint, the settings and ``what`` it holds the
        outputs of: a batch's prompts (a list of texts), or a beam width's scheduled passes'
        plan (``{"in_flight": plan}``, never a list, so never a batch's key)."""
        body = [self.fingerprint, settings.as_dict(), what]
        return hashlib.sha256(json.dumps(body, ensure_ascii=False).encode("utf-8")).hexdigest()

    def _path(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / key[:2] / f"{key}.json"

    def get(self, settings: DecodingSettings, prompts: Sequence[str]) -> list[str] | None:
        """The batch's outputs (best beams) when cached and intact, else None."""
        entry = self.get_entry(settings, prompts)
        return entry[0] if entry is not None else None

    def get_entry(
        self, settings: DecodingSettings, prompts: Sequence[str]
    ) -> tuple[list[str], list[list[str]] | None] | None:
        """The batch's outputs and, where stored, every beam of each; None when missing or
        when the entry is not this batch's as written (then counted as rejected)."""
        key = self._key(settings, list(prompts))
        stored = self._read(key)
        if stored is None:
            return None
        outputs, beams = stored.get("outputs"), stored.get("beams")
        intact = stored.get("sha256") == _content_sha256(key, outputs, beams)
        found = _outputs(outputs, beams, len(prompts)) if intact else None
        if found is None:
            self.rejected()
            return None
        self.stats.batches_from_cache += 1
        self.stats.generations_from_cache += len(found[0])
        return found

    def get_passes(self, settings: DecodingSettings, plan: Json) -> Json | None:
        """What a beam width's scheduled passes sent and got, as ``put_passes`` stored it, when
        cached for this ``plan`` and intact; else None (an entry that is not this plan's as
        written is counted as rejected). The caller counts what it replays (``replayed``) and
        rejects what it cannot read (``rejected``)."""
        key = self._key(settings, {"in_flight": plan})
        stored = self._read(key)
        if stored is None:
            return None
        passes = stored.get("passes")
        if passes is None or stored.get("sha256") != _content_sha256(key, passes, None):
            self.rejected()
            return None
        return passes

    def replayed(self, passes: int) -> None:
        """``passes`` scheduled passes were taken from the cache."""
        self.stats.passes_from_cache += passes

    def _read(self, key: str) -> JsonObject | None:
        """The entry under ``key`` when it says it is this engine's and this key's (its
        content's sha256 is the caller's to check); None when there is none (not counted) or
        it is not (counted as rejected: damaged, another engine's or key's)."""
        if self.folder is None:
            return None
        path = self._path(key)
        try:
            confine.inside(self._root, path)
        except confine.LinkInside as exc:
            self._stop(exc)
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, ValueError):  # unreadable, undecodable: generate again, and overwrite
            text = ""
        try:
            stored = bounds.loads(text) if text else None
        except ValueError:  # damaged, or nested too deep
            stored = None
        if (
            not isinstance(stored, dict)
            or stored.get("format") != FORMAT
            or stored.get("fingerprint") != self.fingerprint
            or stored.get("key") != key
        ):
            self.rejected()
            return None
        return stored

    def rejected(self) -> None:
        """A miss that found an entry it could not use: counted, and said in the reason."""
        self.stats.batches_rejected += 1
        self._say()

    def _say(self) -> None:
        n = self.stats.batches_rejected
        rejected = (
            (
                f"; {n} {'entry' if n == 1 else 'entries'} rejected (damaged, edited after "
                "written, or not this engine's batch or scheduled passes) and generated again"
            )
            if n
            else ""
        )
        self.stats.reason = self.said + rejected

    def put(
        self,
        settings: DecodingSettings,
        prompts: Sequence[str],
        texts: Sequence[str],
        beams: Sequence[Sequence[str]] | None = None,
    ) -> None:
        self.stats.batches_generated += 1
        key = self._key(settings, list(prompts))
        outputs: Json = list(texts)
        kept: Json = [list(b) for b in beams] if beams is not None else None
        self._write(key, {"outputs": outputs, "beams": kept, "sha256": _content_sha256(key, outputs, kept)})

    def put_passes(self, settings: DecodingSettings, plan: Json, passes: Json) -> None:
        """Keep what a beam width's scheduled passes sent and got, for ``plan``."""
        key = self._key(settings, {"in_flight": plan})
        self._write(key, {"passes": passes, "sha256": _content_sha256(key, passes, None)})

    def _write(self, key: str, body: JsonObject) -> None:
        """The entry under ``key``: whose it is and ``body``, written atomically."""
        if self.folder is None or not self.writable:
            return
        entry: JsonObject = {"format": FORMAT, "fingerprint": self.fingerprint, "key": key, **body}
        try:
            with file_lock(
                self.folder / LOCK_FILE, purpose="writing the generation cache", shared=True, root=self._root
            ):
                atomic_write_text(self._path(key), json.dumps(entry, ensure_ascii=False), root=self._root)
        except confine.LinkInside as exc:
            self._stop(exc)
        except OSError as exc:  # disk full, folder made read-only: keep the run going
            self.writable = False
            self.said = f"on, writing stopped ({exc.strerror or exc}) at {self.folder}"
            self._say()
            say(
                f"warning: generation cache {self.folder}: cannot write ({exc.strerror or exc}); "
                "the run goes on without storing batches"
            )
