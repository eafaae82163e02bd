"""Put a small dataset into a `datasets` cache folder the way a hub download leaves it.

`datasets.load_dataset(NAME, CONFIG, split=...)` with network writes
``CACHE/NAME/CONFIG/VERSION/HASH/{dataset_info.json,NAME-SPLIT.arrow}``; offline it reads
that folder back through its ``cache`` module. There is no network here, so the folder is
written with the parquet builder (the format hub datasets are served in) under the name
and config a download would use. Only plain names (no ``namespace/``) are supported.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def cache_hub_dataset(
    cache_dir: Path, name: str, config: str, splits: dict[str, list[dict[str, Any]]]
) -> Path:
    """Write ``splits`` (split -> rows) as the cached hub dataset ``name``/``config``."""
    import datasets
    from datasets.data_files import DataFilesDict
    from datasets.packaged_modules.parquet.parquet import Parquet

    assert "/" not in name
    source = Path(cache_dir) / "_source"
    source.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, rows in splits.items():
        files[split] = [str(source / f"{split}.parquet")]
        datasets.Dataset.from_list(rows).to_parquet(files[split][0])
    builder = Parquet(
        cache_dir=str(cache_dir),
        dataset_name=name,
        config_name=config,
        data_files=DataFilesDict.from_patterns(files),
        hash="0123456789abcdef",
    )
    builder.download_and_prepare()
    # a download names the folder by the config alone; with data_files the builder adds a suffix
    built = Path(builder.cache_dir).parents[1]
    target = built.parent / config
    if built != target:
        shutil.move(str(built), str(target))
    shutil.rmtree(source)
    return target
