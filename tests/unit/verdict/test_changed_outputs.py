"""The change test on analysed cells: sparse, large damage found by the outputs it changed;
outputs that change at one position without a loss; drift that changes every position alike."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from harness.model.cell import Cell
from tests.unit.verdict.score_tables import N, analyze, drifting, levels_of, ran, scored


def _sparse_damage(
    rng: random.Random, q1: Sequence[float], position: int, hit: Sequence[int], batch: int = 8
) -> tuple[list[list[float]], list[list[float]]]:
    """Every prompt in ``hit`` loses its output at ``position`` (agreement 0.05-0.6, quality
    down by 0.1-0.5); everything else equals batch size 1's."""
    agreement = [[1.0] * len(q1) for _ in range(batch)]
    quality = [list(q1) for _ in range(batch)]
    for i in hit:
        agreement[position][i] = rng.uniform(0.05, 0.6)
        quality[position][i] = q1[i] - rng.uniform(0.1, 0.5)
    return agreement, quality


def test_sparse_large_damage_is_found_by_the_changed_outputs_it_leaves() -> None:
    """15 of 64 prompts broken at one slot: the mean drops are large but so noisy that neither
    the position nor the quality test is significant over the default grid's family; every
    broken output changed there and none elsewhere, which the change test counts."""
    rng = random.Random(11)
    q1 = [rng.uniform(0.5, 0.8) for _ in range(N)]
    hit = sorted(rng.sample(range(N), 15))
    [a] = analyze(
        [scored(Cell(8, 1), *_sparse_damage(rng, q1, 3, hit))],
        {1: levels_of(q1)},
        tolerance=0.02,
        alpha=0.01,
        family=135,
    ).cells
    s = a.positions[3]
    assert not ran(s.position_test).flagged and not ran(s.quality_test).flagged
    assert ran(s.change_test).flagged and ran(s.change_test).drop == pytest.approx(15 / N)
    assert a.degraded_positions == (3,) and a.verdict == "fail"
    assert "changed from batch size 1" in a.message


def test_outputs_that_change_at_one_position_without_a_loss_are_not_damage() -> None:
    """Position 5 changes on a third of the prompts (more than elsewhere, significantly), but
    its outputs keep their agreement and quality: the change test flags, the position is not
    degraded."""
    rng = random.Random(12)
    q1 = [rng.uniform(0.5, 0.8) for _ in range(N)]
    agreement = [[1.0] * N for _ in range(8)]
    differs = [[0.0] * N for _ in range(8)]
    for i in rng.sample(range(N), 21):
        agreement[5][i], differs[5][i] = 0.98, 1.0  # one word changed
    [a] = analyze(
        [scored(Cell(8, 1), agreement, [q1] * 8, differs)],
        {1: levels_of(q1)},
        tolerance=0.02,
        alpha=0.01,
        family=135,
    ).cells
    assert ran(a.positions[5].change_test).flagged
    assert a.degraded_positions == () and a.verdict == "pass"
    assert a.drift is not None and a.drift.endswith(
        "more of them at position 5 than at the others, without a loss there"
    )


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.6])
def test_drift_that_changes_every_position_alike_never_trips_the_change_test(rate: float) -> None:
    """Within a prompt, drift's changed outputs sit at random positions: over 200 seeded
    drifting cells no change test is significant at alpha 0.01 before any correction more
    often than alpha allows (its p-values are exact, not approximate)."""
    rng = random.Random(13)
    q1 = [rng.uniform(0.45, 0.8) for _ in range(N)]
    rejected = tested = 0
    for _ in range(200):
        agreement, quality = drifting(rng, q1, rate, 8)
        [a] = analyze(
            [scored(Cell(8, 1), agreement, quality)], {1: levels_of(q1)}, tolerance=0.02, alpha=0.01
        ).cells
        tested += len(a.positions)
        rejected += sum(ran(s.change_test).p_value < 0.01 for s in a.positions)
        assert a.verdict == "pass"
    assert rejected / tested <= 0.01
