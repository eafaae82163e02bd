"""Datasets through `datasets`: local files, ``save_to_disk`` folders and hub names read from
the local cache; presets; a deterministic subset; prompt building and the content hash.

``--dataset`` is resolved in this order: nothing (the bundled set); an existing file
(JSONL/JSON/CSV/Parquet) or folder (written by ``Dataset.save_to_disk`` or
``DatasetDict.save_to_disk``); a preset name (cnn_dailymail, xsum, samsum); any other name
is a `datasets` hub id, read from the local cache. The harness does not download: hub names
load in `datasets`' offline mode unless HF_DATASETS_OFFLINE (else HF_HUB_OFFLINE) is set to
0, so a run behaves the same on a firewalled GPU runner and never picks up a dataset that
changed on the hub since the goldens were recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Protocol

from harness.errors import DatasetError, first_line
from harness.model.dataset import Dataset, DatasetInfo, Document, Subset
from harness.model.vocab import DatasetSource

BUNDLED_DATASET = Path(__file__).resolve().parents[1] / "bundled" / "news.jsonl"
_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
DEFAULT_TEXT_FIELD = "text"
DEFAULT_SUMMARY_FIELD = "summary"
DEFAULT_HUB_SPLIT = "test"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class Preset:
    """A summarization set on the hub, by the name users know it under."""

    hub_ids: tuple[str, ...]  # the first is the one to fetch; the others are older cache names
    config: str | None
    split: str
    text_field: str
    summary_field: str
    revision: str | None = None  # the hub's parquet export, for sets that ship a loading script


# cnn_dailymail as TensorRT-LLM's examples/summarize.py (3.0.0, test, article -> highlights);
# abisee/cnn_dailymail is the parquet copy `datasets` >= 4 can read (ccdv/'s needs a script).
PRESETS: dict[str, Preset] = {
    "cnn_dailymail": Preset(
        ("abisee/cnn_dailymail", "cnn_dailymail"), "3.0.0", "test", "article", "highlights"
    ),
    "xsum": Preset(
        ("EdinburghNLP/xsum", "xsum"), None, "test", "document", "summary", revision="refs/convert/parquet"
    ),
    "samsum": Preset(
        ("Samsung/samsum", "samsum"), None, "test", "dialogue", "summary", revision="refs/convert/parquet"
    ),
}


def content_hash(documents: tuple[Document, ...] | list[Document]) -> str:
    """sha256 over ids, texts and summaries in order: equal content, equal hash."""
    h = hashlib.sha256()
    for d in documents:
        h.update(json.dumps([d.id, d.text, d.summary], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


class Table(Protocol):
    """What the harness reads of a ``datasets.Dataset`` (the package ships no type information)."""

    column_names: list[str]

    def __len__(self) -> int: ...

    def __getitem__(self, column: str) -> Sequence[object]: ...


def _quiet_datasets() -> ModuleType:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    module: ModuleType = datasets
    return module


def _documents(
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


def _not_here(option: str, value: str | None, kind: str) -> None:
    if value is not None:
        raise DatasetError(
            f"{option} {value}: applies to hub datasets and save_to_disk folders, "
            f"not to {kind}; drop {option}"
        )


def _load_file(file: Path, given: str | None, *, config: str | None, split: str | None) -> tuple[Table, str]:
    builder = _BUILDERS.get(file.suffix.lower())
    if builder is None:
        raise DatasetError(
            f"--dataset {file}: unknown file type {file.suffix!r}; "
            f"use one of {', '.join(sorted(_BUILDERS))} or a save_to_disk folder"
        )
    _not_here("--dataset-config", config, "a file")
    _not_here("--split", split, "a file")
    if builder in ("json", "csv"):
        try:
            content = file.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"--dataset {file}: not UTF-8 text (byte {exc.start}); re-save the file as UTF-8"
            ) from None
        if not content.strip():
            raise DatasetError(f"--dataset {file}: holds no rows")
    datasets = _quiet_datasets()
    pattern = _literal_pattern(file)
    try:
        table = datasets.load_dataset(builder, data_files=pattern, split="train")
    except Exception as exc:  # datasets raises many types for unreadable files
        raise DatasetError(
            f"--dataset {file}: cannot be read as {builder}: {first_line(exc) or type(exc).__name__}"
        ) from None
    return table, file.stem if given is not None else "bundled-news"


def _literal_pattern(file: Path) -> str:
    """``file`` as a `datasets` data_files pattern that matches that one file and no other:
    `datasets` reads data_files as glob patterns (``set*.jsonl`` would take its siblings,
    ``news[2024].jsonl`` a character class), so glob characters are escaped, and a path that
    still does not resolve to itself alone is refused."""
    import glob

    from datasets.data_files import resolve_pattern

    literal = str(file.absolute())
    pattern = glob.escape(literal)
    try:
        found = resolve_pattern(pattern, base_path="")
    except FileNotFoundError:
        found = []
    if [os.path.normpath(f) for f in found] != [os.path.normpath(literal)]:
        raise DatasetError(
            f"--dataset {file}: `datasets` cannot read this file name as one "
            "file (it holds characters such as '::' that it reads as a URL); "
            "copy or rename the file to a plain name"
        )
    return pattern


def _load_disk(folder: Path, *, config: str | None, split: str | None) -> tuple[Table, str | None]:
    """A folder written by Dataset.save_to_disk or DatasetDict.save_to_disk."""
    is_dict = (folder / "dataset_dict.json").is_file()
    if not is_dict and not (folder / "state.json").is_file():
        raise DatasetError(
            f"--dataset {folder}: a folder, but not one written by save_to_disk "
            "(no dataset_dict.json or state.json); give a JSONL/CSV/Parquet file "
            "or the folder Dataset.save_to_disk / DatasetDict.save_to_disk wrote"
        )
    _not_here("--dataset-config", config, "a save_to_disk folder")
    datasets = _quiet_datasets()
    try:
        loaded = datasets.load_from_disk(str(folder))
    except Exception as exc:
        raise DatasetError(
            f"--dataset {folder}: cannot be read with load_from_disk: {first_line(exc) or type(exc).__name__}"
        ) from None
    if not is_dict:
        _not_here("--split", split, "a single-split save_to_disk folder")
        return loaded, None
    splits = list(loaded.keys())
    if split is None:
        if DEFAULT_HUB_SPLIT in splits:
            split = DEFAULT_HUB_SPLIT
        elif len(splits) == 1:
            split = splits[0]
        else:
            raise DatasetError(
                f"--dataset {folder}: holds splits {', '.join(splits)} and none "
                f"is called {DEFAULT_HUB_SPLIT!r}; choose one with --split"
            )
    if split not in splits:
        raise DatasetError(f"--split {split}: {folder} has no such split (splits: {', '.join(splits)})")
    return loaded[split], split


_TRUE = {"1", "ON", "YES", "TRUE"}


def downloads_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Only when the user says so: HF_DATASETS_OFFLINE (else HF_HUB_OFFLINE) set to a false
    value. Unset, the harness stays offline."""
    env = os.environ if environ is None else environ
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        if var in env:
            return env[var].strip().upper() not in _TRUE
    return False


@contextlib.contextmanager
def _hub_access() -> Iterator[bool]:
    """`datasets` offline for the call unless downloads are allowed; yields whether they are.
    (datasets reads the variables once, at import; they are read here at every call.)"""
    datasets = _quiet_datasets()
    online = downloads_allowed()
    before = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = not online
    try:
        yield online
    finally:
        datasets.config.HF_HUB_OFFLINE = before


def fetch_command(hub_id: str, config: str | None, split: str, revision: str | None) -> str:
    """The one-liner that puts a hub dataset into the local cache (run with network)."""
    args = [repr(hub_id)] + ([repr(config)] if config else []) + [f"split={split!r}"]
    if revision:
        args.append(f"revision={revision!r}")
    return f'python -c "import datasets; datasets.load_dataset({", ".join(args)})"'


def _load_hub(
    given: str, hub_ids: tuple[str, ...], *, config: str | None, split: str, revision: str | None
) -> tuple[Table, str]:
    """A hub dataset from the local `datasets` cache (or the hub when downloads are allowed)."""
    datasets = _quiet_datasets()
    where = f"config {config}, split {split}" if config else f"split {split}"
    what = f"{hub_ids[0]} ({where})"
    unreachable: list[str] = []  # not cached (offline) or not reachable
    found: list[tuple[str, str]] = []  # (hub id, why): cached or on the hub, but not as asked
    with _hub_access() as online:
        for hub_id in hub_ids:
            try:
                kwargs = {"split": split}
                if revision and online:
                    kwargs["revision"] = revision
                return datasets.load_dataset(hub_id, config, **kwargs), hub_id
            except ConnectionError as exc:
                unreachable.append(first_line(exc) or type(exc).__name__)
            except Exception as exc:  # datasets raises ValueError, FileNotFoundError, ...
                found.append((hub_id, "; ".join(str(exc).strip().splitlines()) or type(exc).__name__))
    if found:
        hub_id, why = found[0]
        option = (
            "--split"
            if re.search(r"split", why, re.IGNORECASE)
            else "--dataset-config"
            if re.search(r"config", why, re.IGNORECASE)
            else "--dataset"
        )
        raise DatasetError(f"--dataset {given}: {hub_id} ({where}) cannot be loaded: {why}; check {option}")
    reason = unreachable[0] if unreachable else "not found"
    local = " (and no local file or folder has that name)" if "/" in given else ""
    fetch = fetch_command(hub_ids[0], config, split, revision)
    if online:
        raise DatasetError(
            f"--dataset {given}: {what} could not be loaded from the hub or the "
            f"local cache{local} ({reason}); fetch it with {fetch}, or pass a local "
            "JSONL/CSV/Parquet file or a save_to_disk folder"
        )
    raise DatasetError(
        f"--dataset {given}: {what} is not in the local datasets cache{local} and this run is "
        f"offline ({reason}); on a machine with network run {fetch} and copy the cache "
        f"(HF_HOME, default ~/.cache/huggingface) here, or set HF_DATASETS_OFFLINE=0 to let the "
        "run download it, or pass a local JSONL/CSV/Parquet file or a save_to_disk folder"
    )


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
            source, (table, split) = DatasetSource.DISK, _load_disk(local, config=config, split=split)
            name = local.name + (f"-{split}" if split else "")
        elif local.is_file():
            source = DatasetSource.BUNDLED if path is None else DatasetSource.FILE
            table, name = _load_file(local, path, config=config, split=split)
        else:
            raise DatasetError(
                f"--dataset {path}: is not a file or folder; give a JSONL, CSV or "
                "Parquet file or a save_to_disk folder"
            )
        where, shown = f"--dataset {local}", str(local)
    elif preset is not None or (_HUB_ID.match(path) and local.suffix.lower() not in _BUILDERS):
        if preset is not None:
            hub_ids, revision = preset.hub_ids, preset.revision
            config = config if config is not None else preset.config
            split = split or preset.split
            text_field = text_field or preset.text_field
            summary_field = summary_field or preset.summary_field
        else:
            hub_ids, split = (path,), split or DEFAULT_HUB_SPLIT
        table, hub_id = _load_hub(path, hub_ids, config=config, split=split, revision=revision)
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
    docs = _documents(table, where, text_field, summary_field, required)
    return dataset_of(
        docs,
        name=name,
        path=shown,
        source=source,
        config=config,
        split=split,
        revision=revision,
        text_field=text_field,
        summary_field=summary_field,
    )


def dataset_of(
    documents: Sequence[Document],
    *,
    name: str,
    path: str,
    source: DatasetSource = DatasetSource.FILE,
    config: str | None = None,
    split: str | None = None,
    revision: str | None = None,
    text_field: str = DEFAULT_TEXT_FIELD,
    summary_field: str = DEFAULT_SUMMARY_FIELD,
) -> Dataset:
    """Documents with their record: where they came from, their count and content hash."""
    docs = tuple(documents)
    info = DatasetInfo(
        name=name,
        path=path,
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
