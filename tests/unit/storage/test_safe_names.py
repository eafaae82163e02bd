"""Names that become file names (issue 24, class 5): no two dataset names share a goldens
file, and the goldens an older harness wrote are still read where they lie."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.config import DecodingSettings
from harness.errors import GoldensError
from harness.inputs.data import dataset_of
from harness.model.dataset import Dataset, Document
from harness.storage.atomic import safe_name
from harness.storage.goldens import GoldenSet, GoldensStore

LONG = "org-team-summaries-" + "x" * 70  # past 80 characters
IDENT = "sha256:" + "ab" * 32


def _old(text: str) -> str:
    """The file name an older harness gave a name (kept here to show the collisions)."""
    s = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")
    return s[:80] or "unnamed"


COLLIDED = [  # pairs the old safe_name mapped to one file name
    ("news a", "news-a"),
    ("news/a", "news-a"),
    ("news a", "news?a"),
    ("news.a.", "news.a"),
    ("-news", "news"),
    (f"{LONG}-n16-seed0", f"{LONG}-n8-seed0"),
    ("News", "news"),  # one file on a case-insensitive file system (macOS, Windows)
    ("", "unnamed"),
    ("news a", "news-a-h" + "0" * 16),  # a name spelled like another's new file name
]


@pytest.mark.parametrize("a, b", COLLIDED)
def test_names_that_used_to_collide_are_distinct(a: str, b: str) -> None:
    assert _old(a) == _old(b) or a.lower() == b.lower() or b.startswith(_old(a))
    assert safe_name(a) != safe_name(b)
    assert safe_name(a).lower() != safe_name(b).lower()


@pytest.mark.parametrize(
    "name", ["bundled-news", "news", "cnn_dailymail-3.0.0-test", "bundled-news-n16-seed0", "a", "_x_"]
)
def test_plain_names_keep_their_file_name(name: str) -> None:
    """The names every goldens file had so far, committed ones included, do not move."""
    assert safe_name(name) == name == _old(name)


@pytest.mark.parametrize(
    "name",
    ["news a", "../../etc/passwd", "x" * 300, "", ".", "..", "a\udcff", "ümlaut", "News", "CON", "-" * 90],
)
def test_every_name_stays_inside_its_folder(name: str) -> None:
    out = safe_name(name)
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", out) and len(out) <= 80
    assert out not in (".", "..")
    assert safe_name(name) == out  # the same name, the same file, every run


def test_no_two_of_many_names_share_a_file() -> None:
    names = [
        f"{p}{sep}{q}"
        for p in ("news", "News", "NEWS", LONG)
        for sep in " -_./:?"
        for q in ("a", "A", "n8", "n16", "")
    ]
    names += [safe_name(n) for n in names]  # a name spelled like another's file name
    assert len({safe_name(n).lower() for n in set(names)}) == len(set(names))


def _dataset(name: str, text: str) -> Dataset:
    docs = (Document("d0", text, "s0"),)
    return dataset_of(docs, name=name, path=f"{name}.jsonl")


def _outputs(golden: GoldenSet | None) -> dict[str, str]:
    """The outputs of goldens the store found (None: it found none, which the caller does not expect)."""
    assert golden is not None
    return golden.outputs


def _golden(ds: Dataset, output: str) -> GoldenSet:
    return GoldenSet(
        identity=IDENT,
        dataset_name=ds.info.name,
        dataset_hash=ds.info.hash,
        settings=DecodingSettings(1, 8).as_dict(),
        outputs={"d0": output},
        source={},
    )


def test_two_datasets_whose_names_used_to_collide_keep_their_own_goldens(tmp_path: Path) -> None:
    store, st = GoldensStore(tmp_path), DecodingSettings(1, 8)
    a, b = _dataset("news a", "first"), _dataset("news-a", "second")
    pa, pb = store.write(_golden(a, "A"), 1), store.write(_golden(b, "B"), 1)
    assert pa != pb
    assert _outputs(store.load(IDENT, a, st)) == {"d0": "A"}
    assert _outputs(store.load(IDENT, b, st)) == {"d0": "B"}


def test_goldens_an_older_harness_wrote_are_read_where_they_lie(tmp_path: Path) -> None:
    """An older harness stored ``news a`` as news-a-beam1.json: still this dataset's, and never
    taken for (or overwritten by) the goldens of ``news-a``, whose file that name is now."""
    store, st = GoldensStore(tmp_path), DecodingSettings(1, 8)
    a, b = _dataset("news a", "first"), _dataset("news-a", "second")
    old = store.legacy_path_for(IDENT, a.info.name, 1)
    assert old is not None and old == store.path_for(IDENT, b.info.name, 1)
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps(_golden(a, "A").as_dict()))
    before = old.read_bytes()
    assert _outputs(store.load(IDENT, a, st)) == {"d0": "A"}
    with pytest.raises(GoldensError, match=r"holds the goldens of dataset 'news a'.*git mv"):
        store.load(IDENT, b, st)
    with pytest.raises(GoldensError, match=r"holds the goldens of dataset 'news a'"):
        store.write(_golden(b, "B"), 1)
    assert old.read_bytes() == before
    store.write(_golden(a, "A2"), 1)  # re-recorded: under its own name now
    assert _outputs(store.load(IDENT, a, st)) == {"d0": "A2"} and old.read_bytes() == before


def test_long_names_differing_past_80_characters_keep_their_own_goldens(tmp_path: Path) -> None:
    store, st = GoldensStore(tmp_path), DecodingSettings(1, 8)
    n16, n8 = _dataset(f"{LONG}-n16-seed0", "sixteen"), _dataset(f"{LONG}-n8-seed0", "eight")
    store.write(_golden(n16, "16"), 1)
    store.write(_golden(n8, "8"), 1)
    assert _outputs(store.load(IDENT, n16, st)) == {"d0": "16"}
    assert _outputs(store.load(IDENT, n8, st)) == {"d0": "8"}
