"""Datasets through `datasets`: what ``--dataset`` names, a deterministic subset, prompt
building and the content hash.

``--dataset`` is resolved in this order: nothing (the bundled set); an existing file
(JSONL/JSON/CSV/Parquet) or folder (written by ``Dataset.save_to_disk`` or
``DatasetDict.save_to_disk``), read by ``harness.inputs.files``; a preset name
(cnn_dailymail, xsum, samsum); any other name is a `datasets` hub id, read from the local
cache. Presets and hub names are ``harness.inputs.hub``'s: the harness does not download
unless HF_DATASETS_OFFLINE (else HF_HUB_OFFLINE) is set to 0, so a run behaves the same on a
firewalled GPU runner and never picks up a dataset that changed on the hub since the goldens
were recorded.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from harness.errors import DatasetError
from harness.inputs.files import BUILDERS, load_disk, load_file
from harness.inputs.hub import DEFAULT_HUB_SPLIT, PRESETS, load_hub
from harness.inputs.tables import documents_of
from harness.model.dataset import Dataset, DatasetInfo, Document, Subset
from harness.model.vocab import DatasetSource

BUNDLED_DATASET = Path(__file__).resolve().parents[1] / "bundled" / "news.jsonl"
DEFAULT_TEXT_FIELD = "text"
DEFAULT_SUMMARY_FIELD = "summary"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def content_hash(documents: tuple[Document, ...] | list[Document]) -> str:
    """sha256 over ids, texts and summaries in order: equal content, equal hash."""
    h = hashlib.sha256()
    for d in documents:
        h.update(json.dumps([d.id, d.text, d.summary], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def load_dataset(
    path: str | None = None,
    *,
    text_field: str | None = None,
    summary_field: str | None = None,
    config: str | None = None,
    split: str | None = None,
) -> Dataset:
    """The bundled set (path None), a file, a save_to_disk folder, a preset or a hub name.

    Fields default to the preset's (for presets) or to text/summary; see the module docstring
    for how ``path`` is resolved.
    """
    preset = PRESETS.get(path) if path is not None else None
    local = BUNDLED_DATASET if path is None else Path(path).expanduser()
    revision = None
    if path is None or local.exists():
        preset = None
        if local.is_dir():
            source, (table, split) = DatasetSource.DISK, load_disk(local, config=config, split=split)
            name = local.name + (f"-{split}" if split else "")
        elif local.is_file():
            source = DatasetSource.BUNDLED if path is None else DatasetSource.FILE
            table, name = load_file(local, path, config=config, split=split)
        else:
            raise DatasetError(
                f"--dataset {path}: is not a file or folder; give a JSONL, CSV or "
                "Parquet file or a save_to_disk folder"
            )
        where, shown = f"--dataset {local}", str(local)
    elif preset is not None or (_HUB_ID.match(path) and local.suffix.lower() not in BUILDERS):
        if preset is not None:
            hub_ids, revision = preset.hub_ids, preset.revision
            config = config if config is not None else preset.config
            split = split or preset.split
            text_field = text_field or preset.text_field
            summary_field = summary_field or preset.summary_field
        else:
            hub_ids, split = (path,), split or DEFAULT_HUB_SPLIT
        table, hub_id = load_hub(path, hub_ids, config=config, split=split, revision=revision)
        source, shown = DatasetSource.HUB, hub_id
        name = "-".join(p for p in (path, config, split) if p)
        where = f"--dataset {path} ({hub_id})"
    else:
        raise DatasetError(
            f"--dataset {path}: no such file; give a JSONL, CSV or Parquet file, "
            "a save_to_disk folder, a preset (" + ", ".join(PRESETS) + ") or a "
            "hub dataset name"
        )
    text_field = text_field or DEFAULT_TEXT_FIELD
    required = summary_field is not None  # named by --summary-field or a preset
    summary_field = summary_field or DEFAULT_SUMMARY_FIELD
    docs = documents_of(table, where, text_field, summary_field, required)
    info = DatasetInfo(
        name=name,
        path=shown,
        count=len(docs),
        hash=content_hash(docs),
        source=source,
        config=config,
        split=split,
        revision=revision,
        text_field=text_field,
        summary_field=summary_field,
    )
    return Dataset(info=info, documents=docs)


def dataset_of(documents: Sequence[Document], *, name: str, path: str) -> Dataset:
    """Documents from a file of one's own (a test's, a notebook's) with their record: their
    count and content hash."""
    docs = tuple(documents)
    return Dataset(DatasetInfo(name=name, path=path, count=len(docs), hash=content_hash(docs)), docs)


def _rank_key(seed: int, doc_id: str) -> str:
    return hashlib.sha256(f"{seed}\0{doc_id}".encode()).hexdigest()


def select_subset(dataset: Dataset, num_prompts: int, seed: int) -> Dataset:
    """``num_prompts`` documents chosen by seed and id alone (the same on every machine and
    Python version, and stable when documents are added), kept in dataset order."""
    total = len(dataset)
    if num_prompts > total:
        raise DatasetError(
            f"--num-prompts {num_prompts}: the dataset {dataset.info.name} has only "
            f"{total} documents; ask for at most {total}"
        )
    chosen = set(sorted(range(total), key=lambda i: _rank_key(seed, dataset.documents[i].id))[:num_prompts])
    docs = tuple(d for i, d in enumerate(dataset.documents) if i in chosen)
    digest = content_hash(docs)
    subset = Subset(
        num_prompts=num_prompts,
        seed=seed,
        of=total,
        source_hash=dataset.info.hash,
        ids=tuple(d.id for d in docs),
        hash=digest,
    )
    info = replace(
        dataset.info,
        name=f"{dataset.info.name}-n{num_prompts}-seed{seed}",
        count=len(docs),
        hash=digest,
        subset=subset,
    )
    return Dataset(info=info, documents=docs)


def build_prompt(template: str, document: Document) -> str:
    """The prompt sent to the engine for one document (the template without a chat format)."""
    return template.replace("{text}", document.text)
