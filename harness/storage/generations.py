"""generations.jsonl, written cell by cell as the run goes, and read back one position at a time.

A run over 2,000 prompts and the default grid makes 90,000 generations (and with beam
search every beam of each); keeping every text in memory until the report is written made
the run's memory grow with them. Instead each cell's texts go to the report folder's
``generations.jsonl`` as soon as the cell is complete (rows ``{"cell", "position", "id",
"output"}`` plus ``"beams"`` for beam search, by position, then document, in the order the
cells ran; the same rows as before), and the run keeps only where each position's rows
start. ``SpilledTexts`` reads one position's texts back when scoring or the report's
examples need them, so memory holds one cell's texts at most, plus the scores.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, overload

from harness.storage.atomic import disk_error, disk_errors

# The position read last, whichever cell it belongs to: repeated reads of one position (as in
# ``texts[p][i]`` over i) cost one read, and memory holds one position's texts, not one per cell.
_LAST: list[tuple[tuple[str, int], tuple[str | None, ...]]] = []


class TextRows(Sequence[tuple[str | None, ...]]):
    """A cell's texts ``[position][document]`` held some other way than as tuples (spilled to
    generations.jsonl, cut for scoring); equal to any sequence of rows with the same texts."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return tuple(self) == tuple(tuple(x) for x in other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))


class SpilledTexts(TextRows):
    """A cell's texts, ``[position][document]``, stored in generations.jsonl."""

    def __init__(self, path: Path, offsets: tuple[int, ...], end: int,
                 index: dict[str, int]) -> None:
        self.path = path
        self.offsets = offsets  # where each position's rows start in the file
        self.end = end
        self.index = index  # document id -> document index (shared by every cell)

    def __len__(self) -> int:
        return len(self.offsets)

    def _read(self, position: int) -> tuple[str | None, ...]:
        start = self.offsets[position]
        key = (str(self.path), start)
        last = _LAST[0] if _LAST else None
        if last is not None and last[0] == key:
            return last[1]
        stop = self.offsets[position + 1] if position + 1 < len(self.offsets) else self.end
        with open(self.path, "rb") as f:
            f.seek(start)
            chunk = f.read(stop - start)
        row: list[str | None] = [None] * len(self.index)  # None: never at this position (sparse)
        for line in chunk.splitlines():
            if line:
                data = json.loads(line)
                row[self.index[data["id"]]] = data["output"]
        texts = tuple(row)
        _LAST[:] = [(key, texts)]
        return texts

    @overload
    def __getitem__(self, index: int) -> tuple[str | None, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[tuple[str | None, ...], ...]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self._read(i) for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._read(index)

    def __iter__(self) -> Iterator[tuple[str | None, ...]]:
        for i in range(len(self)):
            yield self._read(i)

    def __repr__(self) -> str:
        return f"SpilledTexts({self.path}, {len(self)} positions)"


class GenerationsLog:
    """Appends complete cells to generations.jsonl; ``close`` makes the file durable."""

    def __init__(self, path: Path, ids: Sequence[str]) -> None:
        self.path = Path(path)
        self.ids = tuple(ids)
        self.index = {doc: i for i, doc in enumerate(self.ids)}
        self._file: BinaryIO = open(self.path, "ab")
        self._lock = threading.Lock()
        self.cells = 0  # complete cells written
        self.failed = False  # a write failed: the file ends with a partial cell

    def _kept(self) -> str:
        return (f"the {self.cells} cells completed before are kept in it and every generated "
                "batch in the generation cache (unless --no-cache); free space and rerun the same "
                "command to resume from the cache")

    def add(self, cell_id: str, texts: Sequence[Sequence[str | None]],
            beams: Sequence[Sequence[Sequence[str] | None]] = ()) -> SpilledTexts:
        """Write one cell's texts (``[position][document]``, None where a prompt never sat)
        and, for beam search, every beam of each; returns where to read the texts back."""
        offsets: list[int] = []
        with self._lock, disk_errors(self.path, self._kept()):
            self.failed = True  # until the whole cell is written
            for position, row in enumerate(texts):
                offsets.append(self._file.tell())
                lines = []
                for i, (doc, text) in enumerate(zip(self.ids, row)):
                    if text is None:
                        continue
                    entry: dict[str, object] = {"cell": cell_id, "position": position, "id": doc,
                                                "output": text}
                    if beams and beams[position][i] is not None:
                        entry["beams"] = list(beams[position][i])  # type: ignore[arg-type]
                    lines.append(json.dumps(entry, ensure_ascii=False) + "\n")
                self._file.write("".join(lines).encode("utf-8"))
            self._file.flush()
            end = self._file.tell()
            self.failed = False
            self.cells += 1
        return SpilledTexts(self.path, tuple(offsets), end, self.index)

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
