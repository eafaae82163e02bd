"""What the harness reads of a `datasets` table, wherever it was loaded from: `datasets`
imported quietly (no progress bars, errors only), the ``Table`` protocol for its tables and
their rows as checked documents."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Protocol

from harness.errors import DatasetError
from harness.model.dataset import Document


class Table(Protocol):
    """What the harness reads of a ``datasets.Dataset`` (the package ships no type information)."""

    column_names: list[str]

    def __len__(self) -> int: ...

    def __getitem__(self, column: str) -> Sequence[object]: ...


def quiet_datasets() -> ModuleType:
    """The `datasets` module, imported when first needed, with progress bars off and only
    errors logged."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    module: ModuleType = datasets
    return module


def documents_of(
    table: Table, where: str, text_field: str, summary_field: str, summary_required: bool = True
) -> tuple[Document, ...]:
    """Rows of a `datasets.Dataset` as documents, with every field and row checked; without
    ``summary_required`` a dataset lacking the summary field has no references (None)."""
    if len(table) == 0:
        raise DatasetError(f"{where}: holds no rows")
    wanted = [("--text-field", text_field)]
    if summary_required or summary_field in table.column_names:
        wanted.append(("--summary-field", summary_field))
    for option, key in wanted:
        if key not in table.column_names:
            raise DatasetError(
                f"{where}: no field {key!r} (fields: "
                f"{', '.join(table.column_names)}); name the right one with {option}"
            )
    ids = table["id"] if "id" in table.column_names else [f"row-{i}" for i in range(len(table))]
    summaries = table[summary_field] if summary_field in table.column_names else [None] * len(table)
    documents = []
    for i, (doc_id, text, summary) in enumerate(zip(ids, table[text_field], summaries)):
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(
                f"{where}: row {i} has an empty or non-text {text_field!r}; fix or drop that row"
            )
        if not isinstance(summary, str) and summary_field in table.column_names:
            raise DatasetError(f"{where}: row {i} has a non-text {summary_field!r}")
        documents.append(
            Document(id=str(doc_id), text=text, summary=summary if isinstance(summary, str) else None)
        )
    seen: set[str] = set()
    for d in documents:
        if d.id in seen:
            raise DatasetError(f"{where}: id {d.id!r} appears twice; ids must be unique")
        seen.add(d.id)
    return tuple(documents)
