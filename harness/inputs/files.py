"""Datasets on this machine: a JSONL/JSON/CSV/Parquet file (read by the `datasets` builder
its suffix names, as that one file and no other) or a folder written by
``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk`` (a dict's split defaults to the
hub's, ``test``, or its only one)."""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import DatasetError, first_line
from harness.inputs.hub import DEFAULT_HUB_SPLIT
from harness.inputs.tables import Table, quiet_datasets

BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def _not_here(option: str, value: str | None, kind: str) -> None:
    if value is not None:
        raise DatasetError(
            f"{option} {value}: applies to hub datasets and save_to_disk folders, "
            f"not to {kind}; drop {option}"
        )


def load_file(file: Path, given: str | None, *, config: str | None, split: str | None) -> tuple[Table, str]:
    """A JSONL/JSON/CSV/Parquet file as a table, and the dataset's name: the file's stem, or
    ``bundled-news`` for the bundled set (``given`` None)."""
    builder = BUILDERS.get(file.suffix.lower())
    if builder is None:
        raise DatasetError(
            f"--dataset {file}: unknown file type {file.suffix!r}; "
            f"use one of {', '.join(sorted(BUILDERS))} or a save_to_disk folder"
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
    datasets = quiet_datasets()
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


def load_disk(folder: Path, *, config: str | None, split: str | None) -> tuple[Table, str | None]:
    """A folder written by Dataset.save_to_disk or DatasetDict.save_to_disk."""
    is_dict = (folder / "dataset_dict.json").is_file()
    if not is_dict and not (folder / "state.json").is_file():
        raise DatasetError(
            f"--dataset {folder}: a folder, but not one written by save_to_disk "
            "(no dataset_dict.json or state.json); give a JSONL/CSV/Parquet file "
            "or the folder Dataset.save_to_disk / DatasetDict.save_to_disk wrote"
        )
    _not_here("--dataset-config", config, "a save_to_disk folder")
    datasets = quiet_datasets()
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
