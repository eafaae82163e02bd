"""The three questions on small seeded score tables: position dependence, batch-size quality,
determinism; one Holm family; sparse positions."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

from harness.model.cell import Cell
from harness.verdict.messages import ranges
from harness.verdict.statistics import (
    holm,
    one_sided_paired_p,
    one_sided_welch_p,
)
from tests.unit.verdict.score_tables import N, adjusted, analyze, drifting, levels_of, ran, scored


def test_one_sided_p_matches_scipy_ttest() -> None:
    rng = random.Random(0)
    diffs = [rng.gauss(0.05, 0.1) for _ in range(40)]
    expected = stats.ttest_1samp([d - 0.02 for d in diffs], 0.0, alternative="greater").pvalue
    assert one_sided_paired_p(diffs, 0.02) == pytest.approx(expected, rel=1e-9)


def test_one_sided_welch_p_matches_scipy() -> None:
    rng = random.Random(3)
    here = [rng.gauss(0.5, 0.2) for _ in range(20)]
    elsewhere = [rng.gauss(0.8, 0.1) for _ in range(140)]
    expected = stats.ttest_ind(
        [e - 0.02 for e in elsewhere], here, equal_var=False, alternative="greater"
    ).pvalue
    assert one_sided_welch_p(here, elsewhere, 0.02) == pytest.approx(expected, rel=1e-9)


def test_one_sided_p_degenerate_cases() -> None:
    assert one_sided_paired_p([0.0] * 10, 0.02) == 1.0  # identical outputs: nothing to flag
    assert one_sided_paired_p([0.5] * 10, 0.02) == 0.0  # every prompt dropped by 0.5
    assert one_sided_paired_p([0.9], 0.02) == 1.0  # one prompt: nothing is tested


def test_holm_against_hand_computed_values() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])


def test_ranges() -> None:
    assert ranges([2, 3, 4, 5, 6, 7]) == "2–7"
    assert ranges([0, 2, 3, 7]) == "0, 2–3, 7"
    assert ranges([4]) == "4"


@pytest.mark.parametrize("rate", [0.2, 0.45, 0.6])
def test_a_heavily_drifting_healthy_engine_passes(rate: float) -> None:
    """Outputs change at every position alike without losing quality: no question fails, and
    the drift is a finding of its own."""
    rng = random.Random(7)
    q1 = [rng.uniform(0.45, 0.8) for _ in range(N)]
    cells = [Cell(b, w) for w in (1, 2) for b in (2, 4, 8)]
    scores = [scored(c, *drifting(rng, q1, rate, c.batch_size)) for c in cells]
    out = analyze(scores, {1: levels_of(q1), 2: levels_of(q1)}, tolerance=0.02, alpha=0.01).cells
    assert all(a.verdict == "pass" and not a.degraded_positions for a in out)
    bs8 = out[2]
    assert bs8.differing == pytest.approx(rate, abs=0.08)
    assert bs8.drift is not None
    assert bs8.drift.startswith(
        f"bs8-beam1: {bs8.differing:.0%} of outputs differ from batch size 1; quality against references "
    )
    assert bs8.drift.endswith("not position-dependent")


def test_position_dependence_flags_the_broken_slots_exactly() -> None:
    """Positions 2-7 lose both agreement and quality: flagged, 0 and 1 not (they are better
    than the others)."""
    rng = random.Random(1)
    q1 = [rng.uniform(0.5, 0.8) for _ in range(N)]
    bad_a = [rng.uniform(0.05, 0.3) for _ in range(N)]
    agreement = [[1.0] * N] * 2 + [bad_a] * 6
    quality = [q1] * 2 + [[0.1] * N] * 6
    [a] = analyze(
        [scored(Cell(8, 4), agreement, quality)], {4: levels_of(q1)}, tolerance=0.02, alpha=0.01
    ).cells
    assert a.degraded_positions == (2, 3, 4, 5, 6, 7) and a.verdict == "fail"
    assert all(ran(a.positions[p].position_test).flagged for p in range(2, 8))
    assert not ran(a.positions[0].position_test).flagged and not a.positions[1].degraded
    assert a.message.startswith("bs8-beam4: positions 2–7 degraded (quality vs references 0.10 vs ")
    assert "below the other positions" in a.message


def test_a_slot_that_only_changes_outputs_is_position_dependent() -> None:
    """One position's outputs diverge from batch size 1 on every prompt while the others do
    not, even with its quality unchanged: position dependence flags it, quality does not."""
    rng = random.Random(4)
    q1 = [rng.uniform(0.5, 0.8) for _ in range(N)]
    agreement = [[1.0] * N for _ in range(4)]
    agreement[3] = [rng.uniform(0.3, 0.6) for _ in range(N)]
    [a] = analyze(
        [scored(Cell(4, 1), agreement, [q1] * 4)], {1: levels_of(q1)}, tolerance=0.02, alpha=0.01
    ).cells
    assert a.degraded_positions == (3,)
    assert ran(a.positions[3].position_test).flagged and not ran(a.positions[3].quality_test).flagged


def test_uniform_damage_is_caught_by_batch_size_quality() -> None:
    """Every position of batch size > 1 cut short alike: nothing is position-dependent, but
    quality against the references falls below batch size 1 everywhere."""
    rng = random.Random(5)
    q1 = [rng.uniform(0.5, 0.8) for _ in range(N)]
    cut = [q * rng.uniform(0.3, 0.6) for q in q1]
    agreement = [[rng.uniform(0.3, 0.5) for _ in range(N)]] * 8
    [a] = analyze(
        [scored(Cell(8, 1), agreement, [cut] * 8)], {1: levels_of(q1)}, tolerance=0.02, alpha=0.01
    ).cells
    assert a.degraded_positions == tuple(range(8))
    assert all(ran(s.quality_test).flagged and not ran(s.position_test).flagged for s in a.positions)


def test_without_references_quality_is_not_answered_and_position_dependence_still_is() -> None:
    nan = float("nan")
    q1 = [nan] * N
    agreement = [[1.0] * N for _ in range(4)]
    agreement[2] = [0.2] * N
    [a] = analyze(
        [scored(Cell(4, 1), agreement, [q1] * 4)], {1: levels_of(q1)}, tolerance=0.02, alpha=0.01
    ).cells
    assert all(s.quality_test is None and s.quality is None for s in a.positions)
    assert a.omnibus is None and a.degraded_positions == (2,)
    uniform = [[0.3] * N] * 4
    [b] = analyze(
        [scored(Cell(4, 1), uniform, [q1] * 4)], {1: levels_of(q1)}, tolerance=0.02, alpha=0.01
    ).cells
    assert b.verdict == "pass"  # damage alike everywhere: nothing can see it without references


def test_deterministic_gate_fails_any_position_that_differs() -> None:
    rng = random.Random(6)
    q1 = [rng.uniform(0.5, 0.8) for _ in range(N)]
    agreement, quality = drifting(rng, q1, 0.1, 4)
    [off] = analyze(
        [scored(Cell(4, 1), agreement, quality)], {1: levels_of(q1)}, tolerance=0.02, alpha=0.01
    ).cells
    [on] = analyze(
        [scored(Cell(4, 1), agreement, quality)],
        {1: levels_of(q1)},
        tolerance=0.02,
        alpha=0.01,
        deterministic=True,
    ).cells
    assert off.verdict == "pass" and on.verdict == "fail"
    assert on.nondeterministic_positions == (0, 1, 2, 3)
    assert "--deterministic expects every output to equal batch size 1's" in on.message
    same = [[1.0] * N] * 4
    [clean] = analyze(
        [scored(Cell(4, 1), same, [q1] * 4)],
        {1: levels_of(q1)},
        tolerance=0.02,
        alpha=0.01,
        deterministic=True,
    ).cells
    assert clean.verdict == "pass" and clean.drift is None


def test_batch_size_one_is_not_tested() -> None:
    [a] = analyze(
        [scored(Cell(1, 1), [[1.0] * 10], [[0.5] * 10])],
        {1: levels_of([0.5] * 10)},
        tolerance=0.02,
        alpha=0.01,
    ).cells
    assert a.positions[0].position_test is None and a.positions[0].quality_test is None
    assert a.verdict == "pass" and a.omnibus is None


def test_damage_spread_thinly_fails_the_cell_through_the_omnibus_test() -> None:
    """Six positions each lose 0.6 quality on a different 4 of 64 prompts: no position is
    significant alone (mean drop 0.0375 each), the cell's mean over positions is."""
    q1 = [1.0] * N
    rows = []
    for p in range(8):
        row = [1.0] * N
        if p >= 2:
            for i in range(4):
                row[(p * 7 + i * 16) % N] = 0.4
        rows.append(row)
    [a] = analyze(
        [scored(Cell(8, 1), [[1.0] * N] * 8, rows)], {1: levels_of(q1)}, tolerance=0.0, alpha=0.05
    ).cells
    assert a.degraded_positions == ()
    assert a.spread and a.verdict == "fail"
    assert ran(a.omnibus).drop == pytest.approx(6 * 4 * 0.6 / (8 * N))
    assert "drops across positions" in a.message


def test_every_test_joins_one_holm_family() -> None:
    """Per cell: B position tests, B quality tests, B change tests and one omnibus; ``family``
    pads it."""
    rng = random.Random(1)
    cell = Cell(4, 2)
    q1 = [1.0] * 30
    quality = [[1.0] * 30 for _ in range(3)] + [[rng.uniform(0.93, 1.0) for _ in range(30)]]
    [b] = analyze(
        [scored(cell, [[1.0] * 30] * 4, quality)], {2: levels_of(q1)}, tolerance=0.02, alpha=0.01
    ).cells
    raw = ran(b.positions[3].quality_test).p_value
    assert 1e-6 < raw < 1e-3  # large enough for the comparisons below to mean something
    tests = [ran(t) for s in b.positions for t in (s.position_test, s.quality_test, s.change_test)]
    tests.append(ran(b.omnibus))
    assert len(tests) == 13
    smallest = min(t.p_value for t in tests)
    assert min(adjusted(t) for t in tests) == pytest.approx(13 * smallest, rel=1e-9, abs=0)
    [c] = analyze(
        [scored(cell, [[1.0] * 30] * 4, quality)], {2: levels_of(q1)}, tolerance=0.02, alpha=0.01, family=135
    ).cells
    assert ran(c.positions[3].quality_test).p_value == raw
    padded = [ran(t) for s in c.positions for t in (s.position_test, s.quality_test, s.change_test)]
    padded.append(ran(c.omnibus))
    assert min(adjusted(t) for t in padded) == pytest.approx(min(135 * smallest, 1.0), rel=1e-9, abs=0)


def test_sparse_cells_test_each_position_on_its_own_prompts() -> None:
    """NaN marks a prompt that never sat at a position (--rotation sparse): quality is paired
    with batch size 1, position dependence compares the prompts here with the others."""
    nan = float("nan")
    cell = Cell(2, 1)
    q1 = [0.7] * 40
    a0 = [1.0 if i % 2 == 0 else nan for i in range(40)]
    a1 = [nan if i % 2 == 0 else 0.1 + 0.01 * (i % 5) for i in range(40)]
    q0 = [0.7 if i % 2 == 0 else nan for i in range(40)]
    q1_row = [nan if i % 2 == 0 else 0.1 for i in range(40)]
    [a] = analyze(
        [
            scored(
                cell,
                [a0, a1],
                [q0, q1_row],
                [
                    [0.0 if not math.isnan(x) else nan for x in a0],
                    [1.0 if not math.isnan(x) else nan for x in a1],
                ],
            )
        ],
        {1: levels_of(q1)},
        tolerance=0.02,
        alpha=0.01,
    ).cells
    assert [s.n for s in a.positions] == [20, 20]
    assert a.degraded_positions == (1,)
    assert ran(a.positions[1].quality_test).drop == pytest.approx(0.6)
    assert ran(a.positions[1].position_test).flagged and a.positions[1].differing == 1.0
    assert a.positions[0].differing == 0.0


def test_each_cell_says_the_smallest_quality_drop_it_detects() -> None:
    """The power formula of docs/method.md on the cell's own spread: the least sensitive
    position's n and standard deviation of drops, Bonferroni over the run's tests."""
    from harness.verdict.statistics import min_detectable_drop

    rng = random.Random(5)
    q1 = [rng.uniform(0.4, 0.8) for _ in range(32)]
    quality = [[q + rng.gauss(0.0, 0.05) for q in q1] for _ in range(4)]
    [one, four] = analyze(
        [scored(Cell(1, 1), [[1.0] * 32], [q1]), scored(Cell(4, 1), [[1.0] * 32] * 4, quality)],
        {1: levels_of(q1)},
        tolerance=0.02,
        alpha=0.01,
    ).cells
    assert one.detectable is None  # batch size 1 is the level, not tested
    tests = 3 * 4 + 1  # three tests per position (position, quality, changes) and the omnibus
    sds = [stats.tstd([b - q for q, b in zip(row, q1)]) for row in quality]
    assert four.detectable == pytest.approx(
        max(min_detectable_drop(32, sd, tolerance=0.02, alpha=0.01, share=1 / tests) for sd in sds)
    )
    [same] = analyze(
        [scored(Cell(4, 1), [[1.0] * 32] * 4, [q1] * 4)], {1: levels_of(q1)}, tolerance=0.02, alpha=0.01
    ).cells
    assert same.detectable == pytest.approx(0.02)  # no spread: the tolerance itself


def test_the_exchangeable_tail_is_the_exact_probability() -> None:
    """Against enumeration of every outcome of a few prompts."""
    import itertools

    from harness.verdict.statistics import exchangeable_tail

    shares = [0.125, 0.5, 0.25, 1.0, 0.0, 0.375]
    for observed in range(len(shares) + 1):
        exact = 0.0
        for outcome in itertools.product((0, 1), repeat=len(shares)):
            if sum(outcome) >= observed:
                exact += math.prod(q if o else 1 - q for o, q in zip(outcome, shares))
        here = [True] * observed + [False] * (len(shares) - observed)
        assert exchangeable_tail(here, shares) == pytest.approx(exact, rel=1e-12, abs=1e-15)


def test_sparse_cells_count_changes_with_fishers_exact_test() -> None:
    """--rotation sparse: the change test is Fisher's one-sided exact test of the changed
    share at p against the other positions' prompts."""
    from harness.verdict.statistics import change_test

    nan = math.nan
    differs = [
        [1.0, 1.0, 1.0, 0.0, nan, nan, nan, nan, nan, nan, nan, nan],
        [nan, nan, nan, nan, 0.0, 0.0, 1.0, 0.0, nan, nan, nan, nan],
        [nan, nan, nan, nan, nan, nan, nan, nan, 0.0, 0.0, 0.0, 1.0],
    ]
    agreement = [[0.5 if not math.isnan(d) else nan for d in row] for row in differs]
    t = change_test(differs, agreement, 0)
    expected = stats.fisher_exact(np.array([[3, 1], [2, 6]]), alternative="greater").pvalue
    assert t.p_value == pytest.approx(expected, rel=1e-12)
    assert t.drop == pytest.approx(3 / 4 - 2 / 8) and t.n == 4


def test_a_sparse_cell_whose_last_batch_wraps_is_compared_with_the_other_prompts() -> None:
    """--rotation sparse with a batch size that does not divide the prompts: the last batch
    wraps around and seats a few prompts twice. The position is still compared with the other
    positions' prompts (Welch, Fisher) over every prompt seated there, never by a paired test
    over the two or three prompts seated twice."""
    import math

    from harness.model.cell import Cell
    from harness.model.vocab import Rotation
    from harness.plan import Plan
    from harness.verdict.statistics import change_test, position_test

    cell, prompts = Cell(3, 1), 64
    plan = Plan(
        cells=(cell,), reference_cells=(), order=tuple(range(prompts)), seed=0, rotation=Rotation.SPARSE
    )
    agreement = [[math.nan] * prompts for _ in range(cell.batch_size)]
    differs = [[math.nan] * prompts for _ in range(cell.batch_size)]
    seen: set[int] = set()
    for position, doc in plan.seats(cell):
        twice = doc in seen  # the wrapped batch's second visit: lower agreement, changed
        agreement[position][doc], differs[position][doc] = (0.5, 1.0) if twice else (1.0, 0.0)
        seen.add(doc)
    for p in range(cell.batch_size):
        seated = sum(not math.isnan(a) for a in agreement[p])
        assert position_test(agreement, p, 0.02).n == seated
        assert change_test(differs, agreement, p).n == seated


def test_weighted_holm_gives_the_engine_wide_test_its_share_and_keeps_the_error_rate() -> None:
    from harness.verdict.statistics import ENGINE_SHARE, family_weights

    rng = random.Random(4)
    ps = [rng.random() ** 3 for _ in range(20)]
    assert holm(ps, [1.0] * 20) == holm(ps)  # equal weights: Holm's method
    w = family_weights(5, 5, 0, pooled=True)  # test 0 is the engine-wide one
    assert w[0] == pytest.approx(ENGINE_SHARE * 5) and math.fsum(w) == pytest.approx(5.0)
    others = (1 - ENGINE_SHARE) * 5 / 4
    adjusted = holm([0.004, 0.001, 0.5, 0.6, 0.9], w)
    # in order of p / w: test 1 first, over every weight; then test 0, over what is left
    assert adjusted[1] == pytest.approx(0.001 * 5 / others, rel=1e-12)
    assert adjusted[0] == pytest.approx(0.004 * (5 - others) / w[0], rel=1e-12)
    # every null true: any rejection at alpha happens in at most alpha of the families
    draws = np.random.default_rng(0).random((4000, 136))
    weights = family_weights(135, 136, None, pooled=True)  # the engine-wide test's weight on a clean one
    wrong = sum(min(holm(list(row), weights)) < 0.1 for row in draws)
    assert wrong / len(draws) <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / len(draws))
