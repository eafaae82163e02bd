"""A cell's outputs, and generations.jsonl, written cell by cell as the run goes.

A run over 2,000 prompts and the default grid makes 90,000 generations (and with beam
search every beam of each); keeping every text in memory until the report is written made
the run's memory grow with them. Instead each cell's texts go to the report folder's
``generations.jsonl`` as soon as the cell is complete (rows ``{"cell", "position", "id",
"output"}`` plus ``"beams"`` for beam search, by position, then document, in the order the
cells ran), and the run keeps only where each position's rows start: ``CellTexts`` reads one
position back when scoring or the report's examples need it, so memory holds one cell's
texts at most, plus the scores.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from harness.redact import redact
from harness.storage import confine
from harness.storage.atomic import disk_error, disk_errors

Row = tuple[str | None, ...]  # one position: a text per document, None where it never sat
BeamRow = tuple[tuple[str, ...] | None, ...]  # one position: every beam of each document's output


def stored(entry: dict[str, object]) -> dict[str, object]:
    """A row as generations.jsonl keeps it: its output and beams with every secret redacted
    (``harness.redact``: a server that echoes the request's key in its text); the id stays as
    the dataset has it, since rows are found by it. What is scored is read back from the file,
    so every position and the goldens see the same redacted texts. Control characters stay as
    generated (JSON escapes them): these texts are data, scored and compared."""
    out = dict(entry)
    if isinstance(out.get("output"), str):
        out["output"] = redact(str(out["output"]))
    beams = out.get("beams")
    if isinstance(beams, list):
        out["beams"] = [redact(b) if isinstance(b, str) else b for b in beams]
    return out


def stored_line(line: str) -> str:
    """A generations.jsonl line (``merge`` copies its shards' lines) as ``stored`` keeps its
    row; the line itself where nothing is redacted."""
    try:
        entry = json.loads(line)
    except ValueError:
        return redact(line)
    if not isinstance(entry, dict):
        return line
    kept = stored(entry)
    return line if kept == entry else json.dumps(kept, ensure_ascii=False)


@dataclass(frozen=True)
class Spill:
    """Where a cell's rows lie in generations.jsonl: the offset of each position's first row,
    the end of the cell, and each document id's index in the dataset."""

    path: Path
    offsets: tuple[int, ...]
    end: int
    index: Mapping[str, int]

    def read(self, position: int) -> Row:
        start = self.offsets[position]
        stop = self.offsets[position + 1] if position + 1 < len(self.offsets) else self.end
        with open(self.path, "rb") as f:
            f.seek(start)
            chunk = f.read(stop - start)
        row: list[str | None] = [None] * len(self.index)
        for line in chunk.splitlines():
            if line:
                data = json.loads(line)
                row[self.index[data["id"]]] = data["output"]
        return tuple(row)


@dataclass(frozen=True)
class CellTexts:
    """One cell's outputs as the engine generated them, by position then document (None:
    the document never sat at that position, ``--rotation sparse``). Held in memory, with
    every beam of each output under beam search, while the cell is generated; once
    generations.jsonl has them (``GenerationsLog.add``) only where they lie there."""

    held: tuple[Row, ...] = ()
    beams: tuple[BeamRow, ...] = ()  # beam search, while held
    spill: Spill | None = None

    def __len__(self) -> int:
        return len(self.spill.offsets) if self.spill is not None else len(self.held)

    def row(self, position: int) -> Row:
        """The texts at one position, in document order."""
        if not 0 <= position < len(self):
            raise IndexError(position)
        return self.spill.read(position) if self.spill is not None else self.held[position]

    def rows(self) -> Iterator[Row]:
        for position in range(len(self)):
            yield self.row(position)


class GenerationsLog:
    """Appends complete cells to generations.jsonl (inside ``root``, default its folder, never
    through a link: ``confine``); ``close`` makes the file durable."""

    def __init__(self, path: Path, ids: Sequence[str], root: Path | None = None) -> None:
        self.path = Path(path)
        self.ids = tuple(ids)
        self.index = {doc: i for i, doc in enumerate(self.ids)}
        self._file: BinaryIO = open(
            self.path, "ab", opener=confine.opener(self.path.parent if root is None else root)
        )
        self._lock = threading.Lock()
        self.cells = 0  # complete cells written
        self.failed = False  # a write failed: the file ends with a partial cell

    def _kept(self) -> str:
        return (
            f"the {self.cells} cells completed before are kept in it and every generated "
            "batch in the generation cache (unless --no-cache); free space and rerun the same "
            "command to resume from the cache"
        )

    def add(self, cell_id: str, texts: CellTexts) -> CellTexts:
        """Write one cell's held texts and, for beam search, every beam of each; returns the
        same texts, read back from the file from now on."""
        offsets: list[int] = []
        with self._lock, disk_errors(self.path, self._kept()):
            self.failed = True  # until the whole cell is written
            for position, row in enumerate(texts.rows()):
                offsets.append(self._file.tell())
                lines = []
                for i, (doc, text) in enumerate(zip(self.ids, row)):
                    if text is None:
                        continue
                    entry: dict[str, object] = {
                        "cell": cell_id,
                        "position": position,
                        "id": doc,
                        "output": text,
                    }
                    beams = texts.beams[position][i] if texts.beams else None
                    if beams is not None:
                        entry["beams"] = list(beams)
                    lines.append(json.dumps(stored(entry), ensure_ascii=False) + "\n")
                self._file.write("".join(lines).encode("utf-8"))
            self._file.flush()
            end = self._file.tell()
            self.failed = False
            self.cells += 1
        return CellTexts(spill=Spill(self.path, tuple(offsets), end, self.index))

    def close(self) -> None:
        """Flush and fsync; after a failed write only close (that error is already raised)."""
        if self._file.closed:
            return
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as exc:
            with contextlib.suppress(OSError):
                self._file.close()  # what could not be flushed belongs to the failed cell
            if not self.failed:
                raise disk_error(self.path, exc, self._kept()) from None
