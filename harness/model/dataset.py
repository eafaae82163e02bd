"""The documents a run summarizes, and the record of where they came from."""

from __future__ import annotations

from dataclasses import dataclass

from harness.model.vocab import DatasetSource

SUBSET_METHOD = "the num_prompts documents with the smallest sha256(seed, id), kept in dataset order"


@dataclass(frozen=True)
class Document:
    """One dataset row: a document and its reference summary."""

    id: str
    text: str
    summary: str | None  # the reference summary; None: the dataset has none


@dataclass(frozen=True)
class Subset:
    """Which documents ``--num-prompts`` chose, reproducibly from ``--seed``."""

    num_prompts: int
    seed: int
    of: int  # documents in the whole dataset
    source_hash: str  # content hash of the whole dataset
    ids: tuple[str, ...]
    hash: str  # content hash of the chosen documents (equals the run's dataset hash)
    method: str = SUBSET_METHOD


@dataclass(frozen=True)
class DatasetInfo:
    """Where a run's documents came from, and their content hash (goldens and reports are
    keyed by it)."""

    name: str
    path: str
    count: int
    hash: str
    source: DatasetSource = DatasetSource.FILE
    config: str | None = None
    split: str | None = None
    revision: str | None = None
    text_field: str = "text"
    summary_field: str = "summary"
    subset: Subset | None = None


@dataclass(frozen=True)
class Dataset:
    """The documents of a run, in dataset order, with their record."""

    info: DatasetInfo
    documents: tuple[Document, ...]

    def __len__(self) -> int:
        return len(self.documents)

    @property
    def has_references(self) -> bool:
        """Whether every document has a reference summary (batch-size quality needs them)."""
        return all(d.summary is not None for d in self.documents)
