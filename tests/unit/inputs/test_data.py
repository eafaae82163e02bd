from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import DatasetError
from harness.inputs.data import build_prompt, content_hash, load_dataset


def test_bundled_set_meets_its_contract() -> None:
    ds = load_dataset(None)
    assert ds.info.name == "bundled-news" and len(ds) >= 64
    for d in ds.documents:
        assert 60 <= len(d.text.split()) <= 200
        assert d.summary is not None
        assert 10 <= len(d.summary.split()) <= 40
    assert ds.info.hash == content_hash(ds.documents) and len(ds.info.hash) == 64
    assert len({d.id for d in ds.documents}) == len(ds)


def test_bundled_set_is_what_the_seeded_generator_makes() -> None:
    from harness.bundled.synthetic import generate
    from harness.bundled.train import EVAL_COUNT, EVAL_SEED

    ds = load_dataset(None)
    again = generate(EVAL_COUNT, EVAL_SEED, prefix="news")
    assert [(d.id, d.text, d.summary) for d in ds.documents] == [(e.id, e.text, e.summary) for e in again]


def _rows() -> list[dict[str, str]]:
    return [
        {"doc_id": f"d{i}", "article": f"Article number {i} about things.", "highlights": f"Summary {i}."}
        for i in range(5)
    ]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_user_files_with_custom_fields(tmp_path: Path, suffix: str) -> None:
    import datasets

    rows = _rows()
    path = tmp_path / f"mine{suffix}"
    table = datasets.Dataset.from_list(rows)
    if suffix == ".jsonl":
        table.to_json(str(path), lines=True)
    elif suffix == ".csv":
        table.to_csv(str(path), index=False)
    else:
        table.to_parquet(str(path))
    ds = load_dataset(str(path), text_field="article", summary_field="highlights")
    assert ds.info.name == "mine" and len(ds) == 5
    assert ds.documents[3].text == "Article number 3 about things."
    assert ds.documents[3].id == "row-3"  # no 'id' column: ids from row numbers


def test_hash_changes_with_content(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps({"text": "one two", "summary": "x"}) + "\n", encoding="utf-8")
    b.write_text(json.dumps({"text": "one three", "summary": "x"}) + "\n", encoding="utf-8")
    assert load_dataset(str(a)).info.hash != load_dataset(str(b)).info.hash


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "no such file"),
        (b"", "no rows"),
        (b'{"body": "x", "summary": "y"}\n', "no field 'text'"),
        (b'{"text": "\xff\xfe", "summary": "y"}\n', "not UTF-8"),
    ],
)
def test_bad_datasets_name_file_and_fix(tmp_path: Path, content: bytes | None, words: str) -> None:
    path = tmp_path / "bad.jsonl"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DatasetError) as exc:
        load_dataset(str(path))
    assert str(path) in str(exc.value) and words in str(exc.value)


def test_unknown_extension(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("hello")
    with pytest.raises(DatasetError, match="unknown file type"):
        load_dataset(str(path))


def test_build_prompt_uses_template() -> None:
    ds = load_dataset(None)
    assert build_prompt("{text} TL;DR: ", ds.documents[0]) == ds.documents[0].text + " TL;DR: "
