"""Per-prompt scores: what the verdict's tests are computed from.

A score is NaN where there is nothing to score (the prompt never sat at that position, with
``--rotation sparse``; or, for quality, the dataset has no reference summary). JSON has no
NaN, so report.json writes those as null and reads null back as NaN (``Score``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer


def _nan_for_null(value: object) -> object:
    return math.nan if value is None else value


def _null_for_nan(value: float) -> float | None:
    return None if math.isnan(value) else value


Score = Annotated[
    float,
    BeforeValidator(_nan_for_null),
    PlainSerializer(_null_for_nan, return_type=float | None, when_used="json"),
]
Scores = tuple[Score, ...]  # one per prompt, in dataset order


@dataclass(frozen=True)
class CellScores:
    """Scores of one cell, indexed [position][prompt] (prompts in dataset order)."""

    baseline: tuple[Scores, ...]  # agreement: ROUGE-L against the baseline
    reference: tuple[Scores, ...]  # quality: ROUGE-L against the reference summary
    differs: tuple[Scores, ...] = ()  # 1.0 where the text is not batch size 1's
    # 1.0 where the output has no text ROUGE-L can score: empty, blank, only punctuation or
    # symbols, or not text at all (an engine's bytes or numbers are stored as ""); a finding,
    # never a pass (harness.verdict.analysis)
    empty: tuple[Scores, ...] = ()
    # the sparse rotation's follow-up (harness.verdict.follow_up): the cell's outputs from the
    # batches the run spent where its screen saw something, scored apart (None: not followed up)
    follow_up: CellScores | None = None

    def joined(self, more: CellScores) -> CellScores:
        """These scores with ``more``'s where they exist (a later stage of the same cell, whose
        seats are new), the follow-up kept."""

        def join(a: tuple[Scores, ...], b: tuple[Scores, ...]) -> tuple[Scores, ...]:
            if not a or not b:
                return a or b
            return tuple(tuple(y if not math.isnan(y) else x for x, y in zip(ra, rb)) for ra, rb in zip(a, b))

        return CellScores(
            baseline=join(self.baseline, more.baseline),
            reference=join(self.reference, more.reference),
            differs=join(self.differs, more.differs),
            empty=join(self.empty, more.empty),
            follow_up=self.follow_up,
        )


@dataclass(frozen=True)
class Levels:
    """Batch size 1 of one beam width, per prompt: what every other cell is compared with."""

    agreement: Scores  # ROUGE-L of batch size 1 against the baseline (1.0 unless goldens)
    quality: Scores  # ROUGE-L of batch size 1 against the reference (NaN: none)
    # ROUGE-L of batch size 1 against the next document's reference: what an off-topic output
    # scores, the floor a damaged one falls to (NaN: none)
    unrelated: Scores = ()


def mean(xs: Sequence[float]) -> float:
    """The mean (NaN for none), summed exactly: the same figure whatever the order."""
    return math.fsum(xs) / len(xs) if xs else float("nan")


def finite(xs: Sequence[float]) -> list[float]:
    """The scores that exist (NaN: nothing was scored there)."""
    return [x for x in xs if not math.isnan(x)]
