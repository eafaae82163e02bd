"""harness.verdict.scoring.rouge_l against rouge-score itself: equal on random and adversarial texts."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rouge_score import rouge_scorer

from harness.verdict.scoring import lcs_length, rouge_l

WORDS = [
    "the",
    "a",
    "cat",
    "cats",
    "running",
    "runs",
    "ran",
    "harbour",
    "Oslo",
    "é",
    "naïve",
    "42",
    "4",
    "2",
    "x",
    "Über",
    "straße",
    "north-west",
    "can't",
    "TL;DR",
    "…",
    "---",
    "ümlaut",
]


def reference(targets: Sequence[str], predictions: Sequence[str], use_stemmer: bool) -> list[float]:
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)
    return [scorer.score(t, p)["rougeL"].fmeasure for t, p in zip(targets, predictions)]


ADVERSARIAL = [
    ("", ""),
    ("", "some words"),
    ("some words", ""),
    ("!!! ??? ...", "--- ,,,"),
    ("...", "the cat"),
    ("the " * 300, "the " * 299 + "cat"),
    ("a b " * 256, "b a " * 256),
    ("日本語 テキスト", "日本語"),
    ("naïve café", "naive cafe"),
    ("Cats running quickly", "cat runs quick"),
    ("x", "x"),
    ("The cat sat on the mat.", "the cat, sat on the mat"),
    ("42 4 2", "4 2 42"),
]


@pytest.mark.parametrize("stem", [False, True])
@pytest.mark.parametrize("target, prediction", ADVERSARIAL)
def test_adversarial_pairs_equal_rouge_score(target: str, prediction: str, stem: bool) -> None:
    assert rouge_l([target], [prediction], use_stemmer=stem) == reference([target], [prediction], stem)


def _random_pairs_equal_to_the_last_bit(pairs: int, seed: int) -> None:
    rng = random.Random(seed)
    targets, predictions = [], []
    for _ in range(pairs):
        vocab = rng.sample(WORDS, k=rng.randint(1, len(WORDS)))
        targets.append(" ".join(rng.choices(vocab, k=rng.randint(0, 60))))
        predictions.append(" ".join(rng.choices(vocab, k=rng.randint(0, 60))))
    for stem in (False, True):
        ours = rouge_l(targets, predictions, use_stemmer=stem)
        theirs = reference(targets, predictions, stem)
        assert max(abs(a - b) for a, b in zip(ours, theirs)) <= 1e-12
        assert ours == theirs  # in fact bit-identical: the same float expressions


@pytest.mark.slow  # rouge-score's pure-Python table, 20,000 times
def test_ten_thousand_random_pairs_equal_to_the_last_bit() -> None:
    _random_pairs_equal_to_the_last_bit(10_000, seed=0)


def test_a_thousand_random_pairs_equal_to_the_last_bit() -> None:
    """The quick set's share of the same check (other pairs than the first thousand above)."""
    _random_pairs_equal_to_the_last_bit(1_000, seed=1)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.text(max_size=200), st.booleans())
def test_any_unicode_text_equals_rouge_score(target: str, prediction: str, stem: bool) -> None:
    assert rouge_l([target], [prediction], use_stemmer=stem) == reference([target], [prediction], stem)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=40), st.lists(st.sampled_from("abcd"), max_size=40))
def test_lcs_against_the_textbook_table(a: list[str], b: list[str]) -> None:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            table[i][j] = (
                table[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1] else max(table[i - 1][j], table[i][j - 1])
            )
    assert lcs_length(tuple(a), b) == table[-1][-1]


def test_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="2 targets but 1 predictions"):
        rouge_l(["a", "b"], ["a"])
