"""Hub datasets: the presets (summarization sets by the names users know them under) and hub
names read from the local `datasets` cache.

The harness does not download: hub names load in `datasets`' offline mode unless
HF_DATASETS_OFFLINE (else HF_HUB_OFFLINE) is set to 0, so a run behaves the same on a
firewalled GPU runner and never picks up a dataset that changed on the hub since the goldens
were recorded. A name that is not cached gets the one-liner that fetches it.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from harness.errors import DatasetError, first_line
from harness.inputs.tables import Table, quiet_datasets

DEFAULT_HUB_SPLIT = "test"


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
    datasets = quiet_datasets()
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


def load_hub(
    given: str, hub_ids: tuple[str, ...], *, config: str | None, split: str, revision: str | None
) -> tuple[Table, str]:
    """A hub dataset from the local `datasets` cache (or the hub when downloads are allowed)."""
    datasets = quiet_datasets()
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
