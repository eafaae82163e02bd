"""Datasets from save_to_disk folders, presets and hub names in the local cache (offline),
the not-cached message, and the deterministic --num-prompts subset."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import DatasetError
from harness.inputs.data import content_hash, dataset_of, load_dataset, select_subset
from harness.inputs.hub import PRESETS, downloads_allowed, fetch_command
from harness.model.dataset import Dataset
from tests.hub_cache import cache_hub_dataset


def _rows(n: int, text: str = "story", summary: str = "gist", prefix: str = "a") -> list[dict[str, str]]:
    return [
        {"id": f"{prefix}{i}", text: f"Document {i} about the harbour council.", summary: f"Summary {i}."}
        for i in range(n)
    ]


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty `datasets` cache, offline by default (no HF_* variables set)."""
    import datasets

    cache = tmp_path / "hf-datasets"
    cache.mkdir()
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return cache


def test_save_to_disk_dataset_with_custom_fields(tmp_path: Path) -> None:
    import datasets

    folder = tmp_path / "saved"
    datasets.Dataset.from_list(_rows(5, "body", "abstract")).save_to_disk(str(folder))
    ds = load_dataset(str(folder), text_field="body", summary_field="abstract")
    assert ds.info.source == "disk" and ds.info.name == "saved" and ds.info.split is None
    assert [d.id for d in ds.documents] == [f"a{i}" for i in range(5)]
    assert ds.documents[2].text == "Document 2 about the harbour council."
    assert ds.info.text_field == "body"


def test_save_to_disk_datasetdict_picks_test_or_the_named_split(tmp_path: Path) -> None:
    import datasets

    folder = tmp_path / "dd"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(_rows(3, prefix="t")),
            "test": datasets.Dataset.from_list(_rows(4, prefix="s")),
            "validation": datasets.Dataset.from_list(_rows(2, prefix="v")),
        },
    ).save_to_disk(str(folder))
    kw = {"text_field": "story", "summary_field": "gist"}
    assert [d.id for d in load_dataset(str(folder), **kw).documents] == ["s0", "s1", "s2", "s3"]
    val = load_dataset(str(folder), split="validation", **kw)
    assert val.info.split == "validation" and val.info.name == "dd-validation" and len(val) == 2
    with pytest.raises(
        DatasetError, match=r"--split nope: .* no such split \(splits: train, test, validation\)"
    ):
        load_dataset(str(folder), split="nope", **kw)


def test_datasetdict_without_test_split_asks_for_one(tmp_path: Path) -> None:
    import datasets

    folder = tmp_path / "dd2"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(_rows(2)), "dev": datasets.Dataset.from_list(_rows(2))}
    ).save_to_disk(str(folder))
    with pytest.raises(DatasetError, match="choose one with --split"):
        load_dataset(str(folder))


def test_plain_folder_is_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not one written by save_to_disk"):
        load_dataset(str(tmp_path))


def test_split_or_config_on_a_file_is_an_error(tmp_path: Path, small_dataset: Path) -> None:
    with pytest.raises(DatasetError, match="--split test: applies to hub datasets"):
        load_dataset(str(small_dataset), split="test")
    with pytest.raises(DatasetError, match="--dataset-config 3.0.0: applies to hub datasets"):
        load_dataset(str(small_dataset), config="3.0.0")


def test_presets_follow_trtllm_summarize() -> None:
    cnn = PRESETS["cnn_dailymail"]
    assert (cnn.config, cnn.split, cnn.text_field, cnn.summary_field) == (
        "3.0.0",
        "test",
        "article",
        "highlights",
    )
    assert (PRESETS["xsum"].text_field, PRESETS["xsum"].summary_field) == ("document", "summary")
    assert (PRESETS["samsum"].text_field, PRESETS["samsum"].summary_field) == ("dialogue", "summary")


def test_preset_loads_from_the_local_cache_with_its_fields(hub_cache: Path) -> None:
    """`--dataset cnn_dailymail` finds a cache written by load_dataset('cnn_dailymail', '3.0.0')."""
    rows = [
        {"id": f"c{i}", "article": f"Article {i} text.", "highlights": f"Highlight {i}."} for i in range(6)
    ]
    cache_hub_dataset(hub_cache, "cnn_dailymail", "3.0.0", {"test": rows, "train": rows[:2]})
    ds = load_dataset("cnn_dailymail")
    assert ds.info.source == "hub" and ds.info.path == "cnn_dailymail"
    assert (ds.info.config, ds.info.split, ds.info.text_field, ds.info.summary_field) == (
        "3.0.0",
        "test",
        "article",
        "highlights",
    )
    assert ds.info.name == "cnn_dailymail-3.0.0-test" and len(ds) == 6
    assert ds.documents[4].text == "Article 4 text." and ds.documents[4].summary == "Highlight 4."
    assert len(load_dataset("cnn_dailymail", split="train")) == 2
    with pytest.raises(DatasetError, match="no field 'body'.*--text-field"):
        load_dataset("cnn_dailymail", text_field="body")


def test_any_hub_name_with_config_split_and_fields(hub_cache: Path) -> None:
    cache_hub_dataset(hub_cache, "mysums", "v2", {"validation": _rows(3, "doc", "ref")})
    ds = load_dataset("mysums", config="v2", split="validation", text_field="doc", summary_field="ref")
    assert ds.info.source == "hub" and ds.info.name == "mysums-v2-validation" and len(ds) == 3


def test_not_cached_hub_dataset_fails_with_one_line_naming_it_and_the_fix(
    hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetError) as exc:
        load_dataset("cnn_dailymail")
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(
        "--dataset cnn_dailymail: abisee/cnn_dailymail (config 3.0.0, split test) "
        "is not in the local datasets cache"
    )
    assert (
        "python -c \"import datasets; datasets.load_dataset('abisee/cnn_dailymail', '3.0.0', split='test')\""
    ) in message
    assert "save_to_disk" in message and "HF_DATASETS_OFFLINE=0" in message


def test_unset_offline_variables_mean_offline(hub_cache: Path) -> None:
    """Without HF_DATASETS_OFFLINE the harness still does not download (no hub is reached)."""
    assert downloads_allowed({}) is False
    assert downloads_allowed({"HF_DATASETS_OFFLINE": "0"}) is True
    assert downloads_allowed({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "0"}) is False
    assert downloads_allowed({"HF_HUB_OFFLINE": "0"}) is True
    with pytest.raises(
        DatasetError,
        match="some-org/not-here .*split test.* is not in the local "
        "datasets cache .*no local file or folder has that name",
    ):
        load_dataset("some-org/not-here")


def test_fetch_command_carries_revision() -> None:
    assert fetch_command("EdinburghNLP/xsum", None, "test", "refs/convert/parquet") == (
        "python -c \"import datasets; datasets.load_dataset('EdinburghNLP/xsum', split='test', "
        "revision='refs/convert/parquet')\""
    )


def test_a_missing_file_is_still_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such file"):
        load_dataset(str(tmp_path / "data" / "mine.jsonl"))


def _subset_ids(ds: Dataset) -> tuple[str, ...]:
    """The ids --num-prompts chose (a subset the caller expects to be recorded)."""
    assert ds.info.subset is not None
    return ds.info.subset.ids


def test_subset_is_deterministic_and_recorded() -> None:
    full = load_dataset(None)
    a, b = select_subset(full, 16, 3), select_subset(full, 16, 3)
    assert a == b and len(a) == 16
    assert a.info.subset is not None and a.info.subset.ids == tuple(d.id for d in a.documents)
    assert a.info.hash == a.info.subset.hash == content_hash(a.documents) != full.info.hash
    assert a.info.subset.source_hash == full.info.hash and a.info.subset.of == len(full)
    assert a.info.name == "bundled-news-n16-seed3"
    order = [d.id for d in full.documents]
    assert [order.index(i) for i in a.info.subset.ids] == sorted(order.index(i) for i in a.info.subset.ids)
    assert _subset_ids(select_subset(full, 16, 4)) != a.info.subset.ids
    # chosen by id, not position: the same documents are chosen after the file is reordered
    shuffled = dataset_of(full.documents[::-1], name=full.info.name, path=full.info.path)
    assert set(_subset_ids(select_subset(shuffled, 16, 3))) == set(a.info.subset.ids)
    assert _subset_ids(select_subset(full, len(full), 0)) == tuple(order)


def test_subset_larger_than_the_dataset() -> None:
    with pytest.raises(DatasetError, match="--num-prompts 65: the dataset bundled-news has only 64"):
        select_subset(load_dataset(None), 65, 0)


def test_cached_but_other_split_or_config_names_the_option(hub_cache: Path) -> None:
    rows = [{"id": "c0", "article": "A.", "highlights": "H."}]
    cache_hub_dataset(hub_cache, "cnn_dailymail", "3.0.0", {"test": rows})
    with pytest.raises(DatasetError, match=r"Unknown split \"validation\".*check --split"):
        load_dataset("cnn_dailymail", split="validation")
    with pytest.raises(
        DatasetError,
        match=r"config '2.0.0'; Available configs in the cache: \['3.0.0'\]; "
        r"check --dataset-config",
    ):
        load_dataset("cnn_dailymail", config="2.0.0")
