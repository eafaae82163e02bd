"""Issue 15, class 2: a --dataset path that exists is that one file, whatever characters its
name holds (`datasets` reads data_files as glob patterns)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import DatasetError
from harness.inputs.data import load_dataset


def _write(path: Path, n: int, prefix: str) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"{prefix}{i}", "text": f"text {i}", "summary": f"summary {i}"}) + "\n"
            for i in range(n)
        )
    )
    return path


@pytest.mark.parametrize(
    "name", ["set*.jsonl", "news[2024].jsonl", "a?b.jsonl", "x]y.csv", "c{1,2}.jsonl", "p#q.jsonl"]
)
def test_a_path_with_glob_characters_is_that_one_file(tmp_path: Path, name: str) -> None:
    target = tmp_path / name
    if target.suffix == ".csv":
        target.write_text("id,text,summary\n" + "".join(f"t{i},text {i},summary {i}\n" for i in range(4)))
    else:
        _write(target, 4, "t")
    # siblings each pattern reading would also match
    for sibling in ("set-other.jsonl", "news2.jsonl", "axb.jsonl", "c1.jsonl", "set.jsonl"):
        _write(tmp_path / sibling, 60, "sib")
    dataset = load_dataset(str(target))
    assert len(dataset) == 4 and {d.id for d in dataset.documents} == {f"t{i}" for i in range(4)}


def test_a_name_datasets_cannot_read_literally_is_refused(tmp_path: Path) -> None:
    target = _write(tmp_path / "a::b.jsonl", 4, "t")
    with pytest.raises(DatasetError, match=r"a::b.jsonl: `datasets` cannot read this file name"):
        load_dataset(str(target))
