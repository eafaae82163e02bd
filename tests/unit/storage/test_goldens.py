from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.config import DecodingSettings
from harness.errors import GoldensError
from harness.inputs.data import dataset_of
from harness.model.dataset import Dataset, Document
from harness.storage.goldens import GoldenSet, GoldensStore


def _dataset(text: str = "a") -> Dataset:
    docs = (Document("d0", text, "s0"), Document("d1", "b", "s1"))
    return dataset_of(docs, name="mine", path="mine.jsonl")


def _golden(ds: Dataset, settings: DecodingSettings) -> GoldenSet:
    return GoldenSet(
        identity="sha256:" + "ab" * 32,
        dataset_name=ds.info.name,
        dataset_hash=ds.info.hash,
        settings=settings.as_dict(),
        outputs={"d0": "x", "d1": "y"},
        source={},
    )


def test_round_trip_and_layout(tmp_path: Path) -> None:
    store, ds, st = GoldensStore(tmp_path), _dataset(), DecodingSettings(4, 64)
    path = store.write(_golden(ds, st), 4)
    assert path.parent.parent == tmp_path and path.name == "mine-beam4.json"
    loaded = store.load("sha256:" + "ab" * 32, ds, st)
    assert loaded is not None and loaded.outputs == {"d0": "x", "d1": "y"}
    assert store.load("sha256:" + "cd" * 32, ds, st) is None  # other model: no goldens


def test_mismatches_fail_with_the_fix(tmp_path: Path) -> None:
    store, ds, st = GoldensStore(tmp_path), _dataset(), DecodingSettings(4, 64)
    store.write(_golden(ds, st), 4)
    ident = "sha256:" + "ab" * 32
    with pytest.raises(GoldensError, match=r"dataset hash.*--update-goldens"):
        store.load(ident, _dataset("changed"), st)
    with pytest.raises(GoldensError, match=r"max_new_tokens 64 \(run: 32\).*--update-goldens"):
        store.load(ident, ds, DecodingSettings(4, 32))


def test_request_fields_key_the_goldens_both_ways(tmp_path: Path) -> None:
    """--request-field is part of the goldens key (issue 14 A3): goldens recorded with a field
    are not the baseline of a run without it, nor the other way round; settings without any
    keep the key they always had."""
    store, ds, ident = GoldensStore(tmp_path), _dataset(), "sha256:" + "ab" * 32
    plain = DecodingSettings(1, 64)
    rp1 = DecodingSettings(1, 64, request_fields=(("repeat_penalty", "1.0"),))
    assert plain.as_dict() == {
        "beam_width": 1,
        "max_new_tokens": 64,
        "length_penalty": 1.0,
        "early_stopping": True,
        "prompt_template": "{text} TL;DR: ",
    }
    store.write(_golden(ds, rp1), 1)
    assert store.load(ident, ds, rp1) is not None
    with pytest.raises(GoldensError, match=r"request_fields \{'repeat_penalty': 1.0\} \(run: None\)"):
        store.load(ident, ds, plain)
    store.write(_golden(ds, plain), 1)
    with pytest.raises(GoldensError, match=r"request_fields None \(run: \{'repeat_penalty': 1.0\}\)"):
        store.load(ident, ds, rp1)


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda p: p.write_text("{not json"), "corrupt"),
        (lambda p: p.write_text(p.read_text()[:40]), "corrupt"),
        (
            lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "schema_version": 99})),
            "schema_version 99",
        ),
        (
            lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "outputs": {"d0": "x"}})),
            "no golden for 1",
        ),
    ],
)
def test_bad_goldens_files(tmp_path: Path, mutate: Callable[[Path], object], words: str) -> None:
    store, ds, st = GoldensStore(tmp_path), _dataset(), DecodingSettings(4, 64)
    path = store.write(_golden(ds, st), 4)
    mutate(path)
    with pytest.raises(GoldensError) as exc:
        store.load("sha256:" + "ab" * 32, ds, st)
    assert str(path) in str(exc.value) and words in str(exc.value)


def test_names_stay_inside_the_folder(tmp_path: Path) -> None:
    store = GoldensStore(tmp_path)
    path = store.path_for("../../etc", "../../passwd", 1)
    assert tmp_path in path.resolve().parents


def test_other_identities_never_share_a_file(tmp_path: Path) -> None:
    store = GoldensStore(tmp_path)
    a = store.path_for("mypkg.mod:MyEngine:/models/llama-a", "news", 1)
    b = store.path_for("mypkg.mod:MyEngine:/models/llama-b", "news", 1)
    assert a != b


def test_goldens_of_another_model_are_refused(tmp_path: Path) -> None:
    store, ds, st = GoldensStore(tmp_path), _dataset(), DecodingSettings(4, 64)
    path = store.write(_golden(ds, st), 4)
    raw = json.loads(path.read_text())
    raw["identity"] = "sha256:" + "ab" * 31 + "ff"  # same folder prefix, other weights
    path.write_text(json.dumps(raw))
    with pytest.raises(GoldensError, match="recorded for model"):
        store.load("sha256:" + "ab" * 32, ds, st)


def test_update_writes_every_file_and_leaves_no_journal_or_temporaries(tmp_path: Path) -> None:
    from harness.storage.goldens import JOURNAL_FILE

    store, ds = GoldensStore(tmp_path), _dataset()
    paths = store.write_all({w: _golden(ds, DecodingSettings(w, 64)) for w in (1, 2)})
    assert [p.name for p in paths] == ["mine-beam1.json", "mine-beam2.json"]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [
        ".lock",
        "mine-beam1.json",
        "mine-beam2.json",
    ]
    assert not (tmp_path / JOURNAL_FILE).exists()


def test_a_hostile_journal_moves_nothing_outside_or_unexpected(tmp_path: Path) -> None:
    """A committed goldens folder could carry a journal crafted to rename files elsewhere."""
    from harness.storage.goldens import JOURNAL_FILE

    root = tmp_path / "goldens"
    (root / "m").mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (root / "m" / "notes.txt").write_text("keep")
    (root / JOURNAL_FILE).write_text(
        json.dumps(
            {
                "moves": [
                    ["../victim.txt", "m/x-beam1.json"],
                    ["m/notes.txt", "m/x-beam1.json"],
                    ["m/.x-beam1.json.abcdefgh", "../../etc/x-beam1.json"],
                    "junk",
                    [1, 2],
                ]
            }
        )
    )
    (root / "m" / ".x-beam1.json.abcdefgh").write_text("temp")
    GoldensStore(root).recover()
    assert victim.read_text() == "keep" and (root / "m" / "notes.txt").read_text() == "keep"
    assert not (root / JOURNAL_FILE).exists() and not (root / "m" / "x-beam1.json").exists()
    assert not (root / "m" / ".x-beam1.json.abcdefgh").exists()  # a temporary of no commit
