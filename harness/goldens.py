"""Goldens: trusted per-prompt outputs, keyed by model identity, dataset and decoding settings.

Layout: ``GOLDENS/<identity>/<dataset name>-beam<W>.json``. A file that exists but was
recorded for other content or settings is an error with the command that fixes it; it is
never rewritten unless ``--update-goldens`` asks for it, and then only after a complete run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import DecodingSettings
from harness.data import Dataset
from harness.errors import GoldensError

SCHEMA_VERSION = 1
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
FIX = ("re-record them by adding --update-goldens to this run's command (same options), or keep "
       "them and point --goldens-dir elsewhere for these settings")


@dataclass(frozen=True)
class GoldenSet:
    """Golden outputs of one beam width for one model and one dataset."""

    identity: str
    dataset_name: str
    dataset_hash: str
    settings: dict[str, Any]
    outputs: dict[str, str]  # document id -> golden text
    source: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "identity": self.identity,
                "dataset": {"name": self.dataset_name, "hash": self.dataset_hash,
                            "count": len(self.outputs)},
                "settings": self.settings, "source": self.source, "outputs": self.outputs}


def _slug(text: str) -> str:
    """A name that stays inside its folder whatever the input holds."""
    s = _SAFE.sub("-", text).strip("-.")
    return s[:80] or "unnamed"


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file, fsync and rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide goldens from the team
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class GoldensStore:
    """Reads and writes golden sets under one folder."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_for(self, identity: str, dataset_name: str, beam_width: int) -> Path:
        if identity.startswith("sha256:"):
            ident = "sha256-" + _slug(identity[7:23])
        else:  # e.g. "module:Class:/path": a readable stem plus a hash, so paths never collide
            digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]
            ident = f"{_slug(identity)[:40]}-{digest}"
        return self.root / ident / f"{_slug(dataset_name)}-beam{beam_width}.json"

    def load(self, identity: str, dataset: Dataset, settings: DecodingSettings) -> GoldenSet | None:
        """The matching golden set; None when none was recorded; GoldensError on mismatch."""
        path = self.path_for(identity, dataset.name, settings.beam_width)
        if not path.exists():
            return None
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise GoldensError(f"{path}: corrupt goldens ({exc}); {FIX}") from None
        if not isinstance(raw, dict) or raw.get("schema_version") != SCHEMA_VERSION:
            found = raw.get("schema_version") if isinstance(raw, dict) else None
            raise GoldensError(f"{path}: goldens schema_version {found!r}, this harness reads "
                               f"{SCHEMA_VERSION}; {FIX}")
        try:
            golden = GoldenSet(identity=raw["identity"], dataset_name=raw["dataset"]["name"],
                               dataset_hash=raw["dataset"]["hash"], settings=raw["settings"],
                               outputs=raw["outputs"], source=raw.get("source", {}))
        except (KeyError, TypeError) as exc:
            raise GoldensError(f"{path}: goldens lack key {exc}; {FIX}") from None
        if golden.identity != identity:
            raise GoldensError(f"{path}: recorded for model {golden.identity}, not {identity}; {FIX}")
        if not isinstance(golden.settings, dict):
            raise GoldensError(f"{path}: 'settings' must be an object; {FIX}")
        if not isinstance(golden.outputs, dict) or not all(
                isinstance(v, str) for v in golden.outputs.values()):
            raise GoldensError(f"{path}: 'outputs' must map document ids to texts; {FIX}")
        if golden.dataset_hash != dataset.hash:
            raise GoldensError(
                f"{path}: recorded for dataset hash {golden.dataset_hash[:12]}, but this run's "
                f"dataset {dataset.path} hashes to {dataset.hash[:12]} (its content changed); {FIX}")
        want = settings.as_dict()
        diff = [f"{k} {golden.settings.get(k)!r} (run: {v!r})" for k, v in want.items()
                if golden.settings.get(k) != v]
        if diff:
            raise GoldensError(f"{path}: recorded with other decoding settings: {', '.join(diff)}; "
                               f"{FIX}")
        missing = [d.id for d in dataset.documents if d.id not in golden.outputs]
        if missing:
            raise GoldensError(f"{path}: no golden for {len(missing)} documents (e.g. "
                               f"{missing[0]!r}); {FIX}")
        return golden

    def write(self, golden: GoldenSet, beam_width: int) -> Path:
        path = self.path_for(golden.identity, golden.dataset_name, beam_width)
        atomic_write_text(path, json.dumps(golden.as_dict(), indent=1, ensure_ascii=False,
                                           sort_keys=True) + "\n")
        return path
