"""Bad input, the dataset (issue #7): missing, empty, not UTF-8, without the fields asked
for, with an empty text or a repeated id, of an unknown type, or too small for the batch
positions; issue #15 adds a file name that `datasets` would read as a pattern. Each case is
refused in one line by `run` and by `pytest suites/` (``refused``, tests/integration/conftest.py).
"""

from __future__ import annotations

import json

import pytest

from tests.integration.common import Suites
from tests.integration.conftest import TOY, Case, Setup, refused

CASES = [
    Case(
        "dataset-missing",
        lambda s: [*TOY, "--dataset", str(s.tmp / "none.jsonl")],
        (
            "--dataset",
            "none.jsonl: no such file",
        ),
    ),
    Case(
        "dataset-empty",
        lambda s: [*TOY, "--dataset", s.file("empty.jsonl", "")],
        ("--dataset", "empty.jsonl: holds no rows"),
    ),
    Case(
        "dataset-blank-lines",
        lambda s: [*TOY, "--dataset", s.file("blank.jsonl", "\n  \n")],
        ("--dataset", "blank.jsonl: holds no rows"),
    ),
    Case(
        "dataset-not-utf8",
        lambda s: [
            *TOY,
            "--dataset",
            s.file("latin1.jsonl", '{"text": "caf\xe9 au lait", "summary": "x"}\n'.encode("latin-1")),
        ],
        ("--dataset", "latin1.jsonl: not UTF-8 text (byte 13)", "re-save the file as UTF-8"),
    ),
    Case(
        "dataset-text-field-missing",
        lambda s: [
            *TOY,
            "--dataset",
            s.file("article.jsonl", json.dumps({"article": "a b c", "summary": "x"}) + "\n"),
        ],
        ("article.jsonl: no field 'text' (fields: article, summary)", "--text-field"),
    ),
    Case(
        "dataset-summary-field-missing",
        lambda s: [*TOY, "--dataset", str(s.dataset), "--summary-field", "abstract"],
        ("no field 'abstract'", "name the right one with --summary-field"),
    ),
    Case(
        "dataset-empty-text",
        lambda s: [
            *TOY,
            "--dataset",
            s.file("blanktext.jsonl", json.dumps({"text": " ", "summary": "x"}) + "\n"),
        ],
        ("blanktext.jsonl: row 0 has an empty or non-text 'text'", "fix or drop that row"),
    ),
    Case(
        "dataset-duplicate-ids",
        lambda s: [
            *TOY,
            "--dataset",
            s.file(
                "dup.jsonl",
                "".join(json.dumps({"id": "same", "text": "a b", "summary": "x"}) + "\n" for _ in range(2)),
            ),
        ],
        ("dup.jsonl: id 'same' appears twice", "ids must be unique"),
    ),
    Case(
        "dataset-unknown-type",
        lambda s: [*TOY, "--dataset", s.file("notes.txt", "hello")],
        ("notes.txt: unknown file type '.txt'", ".jsonl"),
    ),
    Case(
        "fewer-prompts-than-positions",
        lambda s: [*TOY, "--dataset", str(s.dataset), "--batch-sizes", "32"],
        ("needs at least 32 prompts",),
    ),
    # issue 15, the hostile round: a literal dataset path
    Case(
        "dataset-name-datasets-cannot-read",
        lambda s: [
            *TOY,
            "--dataset",
            s.file("a::b.jsonl", s.dataset.read_text()),
        ],  # 2: a literal path, never a pattern
        ("a::b.jsonl: `datasets` cannot read this file name",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, bad_input_setup: Setup, suites: Suites) -> None:
    refused(case, bad_input_setup, suites)
