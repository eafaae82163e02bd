"""Goldens: trusted per-prompt outputs, keyed by model identity, dataset and decoding settings.

Layout: ``GOLDENS/<identity>/<dataset name>-beam<W>.json``, the dataset name made a file name
that no other dataset name gets (``safe_name``; a name an older harness stored under a name
shared with another dataset is still read where it lies, see ``legacy_path_for``). A file
that exists but was recorded for other content or settings is an error with the command
that fixes it; it is never rewritten unless ``--update-goldens`` asks for it, and then only
after a complete run; a file of another dataset is never rewritten.

An update replaces every file of the run at once or none of them: each new file is written
to a fsynced temporary file, then a journal naming the renames is written atomically (the
commit point), then the renames run and the journal is removed. A run killed before the
journal exists leaves the previous goldens byte for byte; one killed after it is rolled
forward by the next run that touches the folder. Writers hold the folder's lock
(``harness.storage.locks``), so two runs never interleave their updates.

The folder is committed, so it can hold what a pull request put there: every read, write,
rename and removal below it goes through ``confine`` and stops at a symbolic link.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from harness import bounds
from harness.config import DecodingSettings
from harness.errors import GoldensError
from harness.model.dataset import Dataset
from harness.model.json import Json, JsonObject
from harness.outside import cleaned
from harness.redact import redact
from harness.storage import confine
from harness.storage.atomic import (
    TEMP_NAME,
    atomic_write_text,
    durable_temp,
    fsync_dir,
    readable,
    safe_name,
)
from harness.storage.locks import file_lock

SCHEMA_VERSION = 1
LOCK_FILE = ".lock"
JOURNAL_FILE = ".commit.json"
FIX = (
    "re-record them by adding --update-goldens to this run's command (same options), or keep "
    "them and point --goldens-dir elsewhere for these settings"
)
_WEIGHTS = re.compile(r"sha256:[0-9a-f]{64}")  # a weights identity (storage.fingerprint)


@dataclass(frozen=True)
class GoldenSet:
    """Golden outputs of one beam width for one model and one dataset."""

    identity: str
    dataset_name: str
    dataset_hash: str
    settings: JsonObject
    outputs: dict[str, str]  # document id -> golden text
    source: JsonObject

    def as_dict(self) -> JsonObject:
        """The goldens file's content, every secret redacted (``harness.redact``) but in the
        document ids, by which outputs are found (``load`` compares the identity and settings
        redacted the same way)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "identity": redact(self.identity),
            "dataset": {
                "name": redact(self.dataset_name),
                "hash": self.dataset_hash,
                "count": len(self.outputs),
            },
            "settings": cleaned(self.settings, redact),
            "source": cleaned(self.source, redact),
            "outputs": {doc: redact(text) for doc, text in self.outputs.items()},
        }


class GoldensStore:
    """Reads and writes golden sets under one folder."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @staticmethod
    def _identity_folder(identity: str) -> str:
        if _WEIGHTS.fullmatch(identity):  # 64 bits of the weights' hash; load checks the rest
            return "sha256-" + identity[7:23]
        # e.g. "module:Class:/path": a readable stem plus a hash, so paths never collide
        digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return f"{readable(identity, 40)}-{digest}"

    def path_for(self, identity: str, dataset_name: str, beam_width: int) -> Path:
        """The file of one model's goldens of one dataset and beam width: no other identity,
        dataset name or beam width has it."""
        return (
            self.root / self._identity_folder(identity) / f"{safe_name(dataset_name)}-beam{beam_width}.json"
        )

    def legacy_path_for(self, identity: str, dataset_name: str, beam_width: int) -> Path | None:
        """Where harness 0.x named these goldens when that differs from ``path_for``: dataset
        names cut to their first 80 characters with others than letters, digits and ``_.-``
        made ``-`` (so ``news a`` and ``news-a`` shared a file). Read, never written."""
        if identity.startswith("sha256:"):
            ident = "sha256-" + readable(identity[7:23])
        else:
            ident = self._identity_folder(identity)
        old = self.root / ident / f"{readable(dataset_name)}-beam{beam_width}.json"
        return None if old == self.path_for(identity, dataset_name, beam_width) else old

    def _read(self, path: Path) -> GoldenSet:
        """The golden set in ``path``; GoldensError when it is not one."""
        try:
            raw = bounds.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # unreadable, undecodable, invalid, too deep
            raise GoldensError(f"{path}: corrupt goldens ({exc}); {FIX}") from None
        if not isinstance(raw, dict) or raw.get("schema_version") != SCHEMA_VERSION:
            found = raw.get("schema_version") if isinstance(raw, dict) else None
            raise GoldensError(
                f"{path}: goldens schema_version {found!r}, this harness reads {SCHEMA_VERSION}; {FIX}"
            )
        dataset = raw.get("dataset")
        found = {
            "identity": raw.get("identity"),
            "name": dataset.get("name") if isinstance(dataset, dict) else None,
            "hash": dataset.get("hash") if isinstance(dataset, dict) else None,
        }
        for key in ("identity", "dataset", "settings", "outputs"):
            if key not in raw:
                raise GoldensError(f"{path}: goldens lack key {key!r}; {FIX}")
        identity, name, digest = found["identity"], found["name"], found["hash"]
        if not isinstance(identity, str) or not isinstance(name, str) or not isinstance(digest, str):
            bad = next(k for k, v in found.items() if not isinstance(v, str))
            raise GoldensError(f"{path}: goldens lack key {bad!r} (a text); {FIX}")
        settings, outputs, source = raw["settings"], raw["outputs"], raw.get("source")
        if not isinstance(settings, dict):
            raise GoldensError(f"{path}: 'settings' must be an object; {FIX}")
        if not isinstance(outputs, dict) or not all(isinstance(v, str) for v in outputs.values()):
            raise GoldensError(f"{path}: 'outputs' must map document ids to texts; {FIX}")
        return GoldenSet(
            identity=identity,
            dataset_name=name,
            dataset_hash=digest,
            settings=settings,
            outputs={k: v for k, v in outputs.items() if isinstance(v, str)},
            source=source if isinstance(source, dict) else {},
        )

    def _owner(self, path: Path) -> str | None:
        """The dataset name ``path`` was recorded for; None when missing or unreadable."""
        if not confine.inside(self.root, path).is_file():
            return None
        try:
            name = self._read(path).dataset_name
        except GoldensError:
            return None
        return name if isinstance(name, str) else None

    def _another_dataset(
        self, path: Path, owner: str, identity: str, dataset_name: str, beam_width: int
    ) -> GoldensError:
        home = self.path_for(identity, owner, beam_width)
        return GoldensError(
            f"{path}: holds the goldens of dataset {owner!r}, not of this run's {dataset_name!r} "
            f"(an older harness gave both names one file, or it was copied here); move that file to "
            f"{home} (git mv) and rerun; nothing was changed"
        )

    def _find(self, identity: str, dataset: Dataset, beam_width: int) -> Path | None:
        """This dataset's goldens file: where ``path_for`` names it, else where an older
        harness did (when it holds this dataset's, not another's); None when there is none."""
        path = confine.inside(self.root, self.path_for(identity, dataset.info.name, beam_width))
        if path.exists():
            owner = self._owner(path)
            if owner is not None and owner != dataset.info.name:
                raise self._another_dataset(path, owner, identity, dataset.info.name, beam_width)
            return path
        old = self.legacy_path_for(identity, dataset.info.name, beam_width)
        if old is not None and self._owner(old) == dataset.info.name:
            return old
        return None

    def load(self, identity: str, dataset: Dataset, settings: DecodingSettings) -> GoldenSet | None:
        """The matching golden set; None when none was recorded; GoldensError on mismatch."""
        self.recover()
        path = self._find(identity, dataset, settings.beam_width)
        if path is None:
            return None
        golden = self._read(path)
        if redact(golden.identity) != redact(identity):
            raise GoldensError(f"{path}: recorded for model {golden.identity}, not {identity}; {FIX}")
        if golden.dataset_hash != dataset.info.hash:
            raise GoldensError(
                f"{path}: recorded for dataset hash {golden.dataset_hash[:12]}, but this run's "
                f"dataset {dataset.info.path} hashes to {dataset.info.hash[:12]} (its content changed), unless it "
                f"is another dataset named {dataset.info.name!r} (give that one a name of its own); "
                f"{FIX}"
            )
        # as the file keeps them, secrets redacted (``GoldenSet.as_dict``)
        want, have = cleaned(settings.as_dict(), redact), cleaned(golden.settings, redact)
        # both ways: keys present only when set (chat, request_fields) must match when absent too
        diff = [
            f"{k} {have.get(k)!r} (run: {want.get(k)!r})"
            for k in [*want, *(k for k in have if k not in want)]
            if have.get(k) != want.get(k)
        ]
        if diff:
            raise GoldensError(f"{path}: recorded with other decoding settings: {', '.join(diff)}; {FIX}")
        missing = [d.id for d in dataset.documents if d.id not in golden.outputs]
        if missing:
            raise GoldensError(f"{path}: no golden for {len(missing)} documents (e.g. {missing[0]!r}); {FIX}")
        return golden

    def check_update(self, identity: str, dataset_name: str, beam_widths: tuple[int, ...]) -> None:
        """Before a run that will record goldens: the files it will replace lie inside the
        folder, through no link, and hold no other dataset's goldens (GoldensError, or
        ``confine.LinkInside``, naming the file and the fix)."""
        self._strays()
        confine.inside(self.root, self.root / LOCK_FILE)
        for w in beam_widths:
            path = confine.inside(self.root, self.path_for(identity, dataset_name, w))
            owner = self._owner(path)
            if owner is not None and owner != dataset_name:
                raise self._another_dataset(path, owner, identity, dataset_name, w)

    def write(self, golden: GoldenSet, beam_width: int) -> Path:
        """Write one golden set (see ``write_all``)."""
        return self.write_all({beam_width: golden})[0]

    def write_all(self, goldens: dict[int, GoldenSet]) -> list[Path]:
        """Replace the files of every beam width at once: all of them or, if the process dies
        before the commit point, none (see the module docstring)."""
        with file_lock(self.root / LOCK_FILE, purpose="writing goldens", root=self.root):
            self._recover()
            for w, golden in goldens.items():
                self.check_update(golden.identity, golden.dataset_name, (w,))
            moves: list[tuple[Path, Path]] = []
            try:
                for w, golden in goldens.items():
                    path = self.path_for(golden.identity, golden.dataset_name, w)
                    text = json.dumps(golden.as_dict(), indent=1, ensure_ascii=False, sort_keys=True) + "\n"
                    moves.append((durable_temp(path, text, root=self.root), path))
            except BaseException:
                for tmp, _ in moves:
                    confine.remove(self.root, tmp, missing_ok=True)
                raise
            journal = self.root / JOURNAL_FILE
            try:
                atomic_write_text(
                    journal,
                    json.dumps(
                        {
                            "moves": [
                                [
                                    tmp.relative_to(self.root).as_posix(),
                                    path.relative_to(self.root).as_posix(),
                                ]
                                for tmp, path in moves
                            ]
                        }
                    ),
                    root=self.root,
                )
            except BaseException:  # before the commit point: the old goldens stay
                for tmp, _ in moves:
                    confine.remove(self.root, tmp, missing_ok=True)
                raise
            self._apply(moves)
            confine.remove(self.root, journal)
            fsync_dir(self.root)
        return [path for _, path in moves]

    def _apply(self, moves: list[tuple[Path, Path]]) -> None:
        for tmp, path in moves:
            if confine.inside(self.root, tmp).exists():
                confine.replace(self.root, tmp, path)
        for folder in {path.parent for _, path in moves}:
            fsync_dir(folder)

    def _inside(self, relative: Json) -> Path | None:
        """A journal entry as a path two levels under the root (identity/file), else None."""
        if not isinstance(relative, str):
            return None
        parts = Path(relative).parts
        if len(parts) != 2 or any(p in ("", ".", "..") for p in parts):
            return None
        return self.root / parts[0] / parts[1]

    def _recover(self) -> None:
        """Under the lock: finish an update whose journal exists (it committed before its
        process died), then remove temporary files of updates that never committed."""
        journal = confine.inside(self.root, self.root / JOURNAL_FILE)
        if journal.exists():
            try:
                written = bounds.loads(journal.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                written = None  # journals are written atomically; an unreadable one is not ours
            entries = written.get("moves") if isinstance(written, dict) else None
            moves = []
            for entry in entries if isinstance(entries, list) else []:
                pair = [self._inside(x) for x in entry] if isinstance(entry, list) else []
                # only our own renames: hidden temporary file -> <name>-beam<W>.json, same folder
                if (
                    len(pair) == 2
                    and pair[0] is not None
                    and pair[1] is not None
                    and pair[0].parent == pair[1].parent
                    and TEMP_NAME.match(pair[0].name)
                    and pair[0].name.startswith(f".{pair[1].name}.")
                ):
                    moves.append((pair[0], pair[1]))
            self._apply(moves)
            confine.remove(self.root, journal)
            fsync_dir(self.root)
        for stray in self._strays():
            confine.remove(self.root, stray)

    def _strays(self) -> list[Path]:
        """Temporary files of updates that never committed, in the folder and its identity
        folders; ``confine.LinkInside`` at the first symbolic link met there."""
        if not self.root.is_dir():
            return []
        found = []
        for entry in confine.entries(self.root, self.root):
            if entry.is_dir():
                found += [
                    p for p in confine.entries(self.root, entry) if TEMP_NAME.match(p.name) and p.is_file()
                ]
            elif TEMP_NAME.match(entry.name) and entry.is_file():
                found.append(entry)
        return found

    def recover(self) -> None:
        """Before reading: roll an interrupted update forward and remove the temporary files
        of one that never committed (a no-op, without the lock, when there is neither)."""
        journal = confine.inside(self.root, self.root / JOURNAL_FILE).exists()
        if not journal and not self._strays():
            return
        try:
            with file_lock(
                self.root / LOCK_FILE, purpose="finishing an interrupted goldens update", root=self.root
            ):
                self._recover()
        except OSError as exc:
            if journal:
                raise GoldensError(
                    f"{self.root / JOURNAL_FILE}: an interrupted goldens update could "
                    f"not be finished ({exc.strerror}); make {self.root} writable and "
                    "rerun, or re-record with --update-goldens"
                ) from None
            # leftover temporary files in a folder this run cannot write are harmless
