"""Small seeded score tables for the statistics tests (test_statistics.py,
test_changed_outputs.py): batch size 1's levels, one cell's scores, and the analysis over
them."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Concatenate, ParamSpec

from harness.model.analysis import DropTest, RunAnalysis
from harness.model.cell import Cell
from harness.model.scores import CellScores, Levels
from harness.verdict import analysis as analysis_module

N = 64
P = ParamSpec("P")

Rows = Sequence[Sequence[float]]  # [position][prompt]


def levels_of(quality: Sequence[float], agreement: Sequence[float] | None = None) -> Levels:
    return Levels(agreement=tuple(agreement or [1.0] * len(quality)), quality=tuple(quality))


def scored(
    cell: Cell, agreement: Rows, quality: Rows, differs: Rows | None = None
) -> tuple[Cell, CellScores]:
    differs = differs or [[float(a < 1.0) for a in row] for row in agreement]
    return cell, CellScores(
        baseline=tuple(tuple(r) for r in agreement),
        reference=tuple(tuple(r) for r in quality),
        differs=tuple(tuple(r) for r in differs),
    )


def _over_pairs(
    analyze: Callable[Concatenate[Mapping[Cell, CellScores], P], RunAnalysis],
) -> Callable[Concatenate[Iterable[tuple[Cell, CellScores]], P], RunAnalysis]:
    """``analyze`` taking its scores as (cell, scores) pairs, in their order; its other
    parameters as they are."""

    def over_pairs(
        scores: Iterable[tuple[Cell, CellScores]], /, *args: P.args, **kwargs: P.kwargs
    ) -> RunAnalysis:
        return analyze(dict(scores), *args, **kwargs)

    return over_pairs


# the statistics over (cell, scores) pairs (harness.verdict.analysis.analyze's other parameters)
analyze = _over_pairs(analysis_module.analyze)


def drifting(
    rng: random.Random, bs1_quality: Sequence[float], rate: float, positions: int
) -> tuple[list[list[float]], list[list[float]]]:
    """Benign drift: a share ``rate`` of outputs differ late (agreement 0.4-0.8) at every
    position alike, their quality moving up or down by as much (no loss on average)."""
    agreement: list[list[float]] = []
    quality: list[list[float]] = []
    for _ in range(positions):
        a_row, q_row = [], []
        for q in bs1_quality:
            if rng.random() < rate:
                a_row.append(rng.uniform(0.4, 0.8))
                q_row.append(min(1.0, max(0.0, q + rng.choice((-1, 1)) * rng.uniform(0.0, 0.1))))
            else:
                a_row.append(1.0)
                q_row.append(q)
        agreement.append(a_row)
        quality.append(q_row)
    return agreement, quality


def ran(test: DropTest | None) -> DropTest:
    """A test the analysis ran (None: it did not, which the caller does not expect)."""
    assert test is not None
    return test


def adjusted(test: DropTest | None) -> float:
    """A test's p-value after Holm's correction (set for every test the analysis ran)."""
    assert test is not None and test.p_adjusted is not None
    return test.p_adjusted
