"""The options that choose a run's documents, one group handed to the dataset loader."""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.option import option
from harness.config.parse import positive_int
from harness.model.vocab import Receiver


@dataclass(frozen=True)
class DatasetOptions:
    """Which documents a run summarizes, and which of their fields (``harness.inputs``)."""

    dataset: str | None = option(
        None,
        "--dataset",
        "documents with reference summaries: a JSONL, JSON, CSV or Parquet file, a save_to_disk folder, a preset "
        "(cnn_dailymail, xsum, samsum) or a datasets hub name read from the local cache (default: the bundled "
        "news set)",
        Receiver.DATASET,
        metavar="PATH|NAME",
    )

    dataset_config: str | None = option(
        None,
        "--dataset-config",
        "configuration of a hub dataset (default: the preset's, e.g. 3.0.0 for cnn_dailymail)",
        Receiver.DATASET,
        metavar="NAME",
    )

    split: str | None = option(
        None,
        "--split",
        "split of a hub dataset or a saved DatasetDict (default: the preset's, else test)",
        Receiver.DATASET,
        metavar="NAME",
    )

    text_field: str | None = option(
        None,
        "--text-field",
        "dataset field holding the document (default: the preset's, else text)",
        Receiver.DATASET,
        metavar="NAME",
    )

    summary_field: str | None = option(
        None,
        "--summary-field",
        "dataset field holding the reference summary (default: the preset's, else summary)",
        Receiver.DATASET,
        metavar="NAME",
    )

    num_prompts: int | None = option(
        None,
        "--num-prompts",
        "use N documents of the dataset, chosen reproducibly from --seed (default: all)",
        Receiver.DATASET,
        parse=positive_int,
        metavar="N",
    )
