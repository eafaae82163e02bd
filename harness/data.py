"""Dataset loading through `datasets`, prompt building and the dataset's content hash."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from harness.errors import DatasetError

BUNDLED_DATASET = Path(__file__).resolve().parent / "bundled" / "news.jsonl"
_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


@dataclass(frozen=True)
class Document:
    """One dataset row: a document and its reference summary."""

    id: str
    text: str
    summary: str


@dataclass(frozen=True)
class Dataset:
    """The documents of a run with the identity recorded in reports and goldens."""

    name: str
    path: str
    documents: tuple[Document, ...]
    hash: str

    def __len__(self) -> int:
        return len(self.documents)


def content_hash(documents: tuple[Document, ...] | list[Document]) -> str:
    """sha256 over ids, texts and summaries in order: equal content, equal hash."""
    h = hashlib.sha256()
    for d in documents:
        h.update(json.dumps([d.id, d.text, d.summary], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def load_dataset(path: str | None, *, text_field: str = "text",
                 summary_field: str = "summary") -> Dataset:
    """Load the bundled set (path None) or a user's JSONL/JSON/CSV/Parquet file."""
    file = BUNDLED_DATASET if path is None else Path(path).expanduser()
    name = "bundled-news" if path is None else file.stem
    if not file.exists():
        raise DatasetError(f"--dataset {path}: no such file; give a JSONL, CSV or Parquet file")
    if not file.is_file():
        raise DatasetError(f"--dataset {path}: is not a file; give a JSONL, CSV or Parquet file")
    builder = _BUILDERS.get(file.suffix.lower())
    if builder is None:
        raise DatasetError(f"--dataset {file}: unknown file type {file.suffix!r}; "
                           f"use one of {', '.join(sorted(_BUILDERS))}")
    if builder in ("json", "csv"):
        try:
            content = file.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetError(f"--dataset {file}: not UTF-8 text (byte {exc.start}); "
                               "re-save the file as UTF-8") from None
        if not content.strip():
            raise DatasetError(f"--dataset {file}: holds no rows")

    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        table = datasets.load_dataset(builder, data_files=str(file), split="train")
    except Exception as exc:  # datasets raises many types for unreadable files
        raise DatasetError(f"--dataset {file}: cannot be read as {builder}: "
                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if len(table) == 0:
        raise DatasetError(f"--dataset {file}: holds no rows")
    for option, key in (("--text-field", text_field), ("--summary-field", summary_field)):
        if key not in table.column_names:
            raise DatasetError(f"--dataset {file}: no field {key!r} (fields: "
                               f"{', '.join(table.column_names)}); name the right one with {option}")
    ids = table["id"] if "id" in table.column_names else [f"row-{i}" for i in range(len(table))]
    documents = []
    for i, (doc_id, text, summary) in enumerate(zip(ids, table[text_field], table[summary_field])):
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"--dataset {file}: row {i} has an empty or non-text "
                               f"{text_field!r}; fix or drop that row")
        if not isinstance(summary, str):
            raise DatasetError(f"--dataset {file}: row {i} has a non-text {summary_field!r}")
        documents.append(Document(id=str(doc_id), text=text, summary=summary))
    seen: set[str] = set()
    for d in documents:
        if d.id in seen:
            raise DatasetError(f"--dataset {file}: id {d.id!r} appears twice; ids must be unique")
        seen.add(d.id)
    docs = tuple(documents)
    return Dataset(name=name, path=str(file), documents=docs, hash=content_hash(docs))


def build_prompt(template: str, document: Document) -> str:
    """The prompt sent to the engine for one document."""
    return template.replace("{text}", document.text)
