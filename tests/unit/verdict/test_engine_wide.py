"""The engine-wide test: mild damage spread over every batched cell fails the run, though no
cell fails alone; drift, which costs no quality, passes it; and it sits in the one Holm family."""

from __future__ import annotations

import random

import pytest

from harness.config.basics import DEFAULT_BEAM_WIDTHS
from harness.model.cell import Cell
from harness.model.scores import CellScores
from harness.model.vocab import Verdict
from harness.plan import grid
from harness.verdict.decide import Decision, decide, family_size
from tests.unit.verdict.score_tables import N, drifting, levels_of, scored

DESIGN = grid(None, DEFAULT_BEAM_WIDTHS, 8)
BATCHED = tuple(c for c in DESIGN if c.batch_size > 1)


def _late_loss(
    rng: random.Random, q1: list[float], share: float, positions: int
) -> tuple[list[list[float]], ...]:
    """A share of the outputs lose 0.3-0.5 of quality late (the rest equal batch size 1's)."""
    agreement, quality = [], []
    for _ in range(positions):
        hit = [rng.random() < share for _ in q1]
        agreement.append([rng.uniform(0.6, 0.8) if h else 1.0 for h in hit])
        quality.append([max(0.0, q - rng.uniform(0.3, 0.5)) if h else q for q, h in zip(q1, hit)])
    return agreement, quality


def _decide(rows: dict[Cell, tuple[list[list[float]], ...]], q1: list[float]) -> Decision:
    scores: dict[Cell, CellScores] = dict(scored(c, a, q) for c, (a, q) in rows.items())
    levels = {w: levels_of(q1) for w in DEFAULT_BEAM_WIDTHS}
    return decide(BATCHED, scores, levels, {}, None, design=DESIGN, tolerance=0.02, alpha=0.01)


@pytest.fixture
def q1() -> list[float]:
    rng = random.Random(5)
    return [rng.uniform(0.45, 0.85) for _ in range(N)]


def test_mild_damage_in_every_batched_cell_fails_the_engine_though_no_cell_fails(q1: list[float]) -> None:
    rng = random.Random(1)  # 8% of the outputs: about 0.03 of quality lost in every cell
    decision = _decide({c: _late_loss(rng, q1, 0.08, c.batch_size) for c in BATCHED}, q1)
    e = decision.engine_wide
    assert e is not None and e.failed and decision.verdict == Verdict.FAIL
    assert all(c.verdict == Verdict.PASS for c in decision.cells)  # no cell shows it alone
    assert 0.02 < e.test.drop < 0.05 and e.test.n == N and e.cells == tuple(c.id for c in BATCHED)
    assert "damage spread over the engine" in e.message


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.6])
def test_drift_passes_the_engine_wide_test(q1: list[float], rate: float) -> None:
    rng = random.Random(2)
    decision = _decide({c: drifting(rng, q1, rate, c.batch_size) for c in BATCHED}, q1)
    e = decision.engine_wide
    assert e is not None and not e.failed and decision.verdict == Verdict.PASS
    assert "within the tolerance" in e.message


def test_the_engine_wide_test_is_one_test_of_the_family_and_needs_two_batched_cells(q1: list[float]) -> None:
    assert family_size(DESIGN, references=True) == 3 * 14 * 3 + 9 + 1
    assert family_size(DESIGN, references=False) == 2 * 14 * 3  # no quality question without references
    one = (Cell(1, 1), Cell(8, 1))
    assert family_size(one, references=True) == 3 * 8 + 1  # over one cell it would be its omnibus test
    rng = random.Random(3)
    alone = decide(
        (Cell(8, 1),),
        dict([scored(Cell(8, 1), *_late_loss(rng, q1, 0.2, 8))]),
        {1: levels_of(q1)},
        {},
        None,
        design=one,
        tolerance=0.02,
        alpha=0.01,
    )
    assert alone.engine_wide is None


def test_an_engine_wide_drop_beyond_the_tolerance_but_not_significant_says_so() -> None:
    """0.028 below batch size 1 with the tolerance at 0.02 is not 'within the tolerance': the
    message said 'within the tolerance 0.02 or not significant' for both."""
    from harness.model.analysis import DropTest
    from harness.verdict.messages import engine_message

    beyond = engine_message(
        DropTest(drop=0.028, p_value=0.2, n=64, p_adjusted=1.0), ("bs2-beam1",), False, 0.02
    )
    assert beyond.endswith(
        "0.028 below batch size 1 over every batched output of 1 cells (64 prompts, adjusted p 1): beyond the tolerance 0.02, but not significantly"
    )
    within = engine_message(
        DropTest(drop=0.004, p_value=0.9, n=64, p_adjusted=1.0), ("bs2-beam1",), False, 0.02
    )
    assert within.endswith(": within the tolerance 0.02")
