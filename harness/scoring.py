"""ROUGE-L F1 through rouge-score, the implementation TensorRT-LLM's and MLPerf's checks use."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from rouge_score import rouge_scorer


@lru_cache(maxsize=2)
def _scorer(use_stemmer: bool) -> rouge_scorer.RougeScorer:
    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)


def rouge_l(targets: Sequence[str], predictions: Sequence[str], *, use_stemmer: bool = False) -> list[float]:
    """ROUGE-L F1 of each (target, prediction) pair."""
    if len(targets) != len(predictions):
        raise ValueError(f"{len(targets)} targets but {len(predictions)} predictions")
    scorer = _scorer(use_stemmer)
    return [scorer.score(t, p)["rougeL"].fmeasure for t, p in zip(targets, predictions)]
