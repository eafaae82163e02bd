from __future__ import annotations

import random

import pytest
from scipy import stats

from harness.plan import Cell
from harness.results import CellScores
from harness.verdict.statistics import analyze, holm, one_sided_paired_p, ranges


def test_one_sided_p_matches_scipy_ttest():
    rng = random.Random(0)
    diffs = [rng.gauss(0.05, 0.1) for _ in range(40)]
    expected = stats.ttest_1samp([d - 0.02 for d in diffs], 0.0, alternative="greater").pvalue
    assert one_sided_paired_p(diffs, 0.02) == pytest.approx(expected, rel=1e-9)


def test_one_sided_p_degenerate_cases():
    assert one_sided_paired_p([0.0] * 10, 0.02) == 1.0  # identical outputs: nothing to flag
    assert one_sided_paired_p([0.5] * 10, 0.02) == 0.0  # every prompt dropped by 0.5


def test_holm_against_hand_computed_values():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])


def test_ranges():
    assert ranges([2, 3, 4, 5, 6, 7]) == "2–7"
    assert ranges([0, 2, 3, 7]) == "0, 2–3, 7"
    assert ranges([4]) == "4"


def _cell_scores(cell, per_position):
    return CellScores(cell=cell, baseline=tuple(tuple(x) for x in per_position),
                      reference=tuple(tuple(x) for x in per_position))


def test_analyze_flags_exact_positions_and_formats_message():
    rng = random.Random(1)
    n = 64
    level = [1.0] * n
    good = [1.0] * n
    bad = [rng.uniform(0.05, 0.3) for _ in range(n)]
    cell = Cell(8, 4)
    rows = [good, good] + [bad] * 6
    [a] = analyze([_cell_scores(cell, rows)], {4: level}, tolerance=0.02, alpha=0.01)
    assert a.degraded_positions == (2, 3, 4, 5, 6, 7)
    assert a.verdict == "fail"
    assert a.message.startswith("bs8-beam4: positions 2–7 degraded (ROUGE-L ")
    assert a.message.endswith("vs 1.00 at batch size 1)")


def test_analyze_does_not_flag_small_or_noisy_differences():
    rng = random.Random(2)
    n = 64
    level = [rng.uniform(0.6, 1.0) for _ in range(n)]
    # a few late divergences at every position alike: benign drift below the tolerance
    rows = [[x if rng.random() > 0.03 else x - 0.3 for x in level] for _ in range(8)]
    [a] = analyze([_cell_scores(Cell(8, 1), rows)], {1: level}, tolerance=0.02, alpha=0.01)
    assert a.degraded_positions == ()
    assert a.verdict == "pass"


def test_analyze_batch_size_one_is_not_tested():
    [a] = analyze([_cell_scores(Cell(1, 1), [[0.5] * 10])], {1: [0.5] * 10},
                  tolerance=0.02, alpha=0.01)
    assert a.positions[0].p_value is None and a.verdict == "pass"


def test_damage_spread_thinly_fails_the_cell_through_the_omnibus_test():
    """Six positions each lose 0.6 on a different 4 of 64 prompts: no position is
    significant alone (mean drop 0.0375 each), the cell's mean over positions is."""
    cell = Cell(8, 1)
    rows = []
    for p in range(8):
        row = [1.0] * 64
        if p >= 2:
            for i in range(4):
                row[(p * 7 + i * 16) % 64] = 0.4
        rows.append(row)
    # the same prompts' drops, spread: the per-prompt means carry the damage
    [a] = analyze([_cell_scores(cell, rows)], {1: [1.0] * 64}, tolerance=0.0, alpha=0.05)
    assert a.degraded_positions == ()
    assert a.spread and a.verdict == "fail"
    assert a.cell_drop == pytest.approx(6 * 4 * 0.6 / (8 * 64))
    assert "quality drops across positions" in a.message


def test_omnibus_joins_the_holm_family_and_stays_quiet_on_a_clean_cell():
    cell = Cell(4, 2)
    [a] = analyze([_cell_scores(cell, [[1.0] * 20] * 4)], {2: [1.0] * 20}, tolerance=0.02,
                  alpha=0.01)
    assert a.verdict == "pass" and not a.spread and a.cell_drop == 0.0
    assert a.cell_p_adjusted == 1.0
    # one damaged position: its p-value is adjusted over 4 positions + 1 cell test = 5
    rng = random.Random(1)
    rows = [[1.0] * 30 for _ in range(3)] + [[rng.uniform(0.5, 0.9) for _ in range(30)]]
    [b] = analyze([_cell_scores(cell, rows)], {2: [1.0] * 30}, tolerance=0.02, alpha=0.01)
    smallest = min(b.positions[3].p_value, one_sided_paired_p(
        [1.0 - sum(r[i] for r in rows) / 4 for i in range(30)], 0.02))
    assert min(b.positions[3].p_adjusted, b.cell_p_adjusted) == pytest.approx(5 * smallest)
    [c] = analyze([_cell_scores(cell, rows)], {2: [1.0] * 30}, tolerance=0.02, alpha=0.01,
                  family=51)
    assert min(c.positions[3].p_adjusted, c.cell_p_adjusted) == pytest.approx(51 * smallest)


def test_a_position_with_one_prompt_is_never_flagged():
    assert one_sided_paired_p([0.9], 0.02) == 1.0


def test_sparse_cells_test_each_position_on_its_own_prompts():
    """NaN marks a prompt that never sat at a position (--rotation sparse)."""
    nan = float("nan")
    cell = Cell(2, 1)
    pos0 = [1.0 if i % 2 == 0 else nan for i in range(40)]
    pos1 = [nan if i % 2 == 0 else 0.1 for i in range(40)]
    [a] = analyze([_cell_scores(cell, [pos0, pos1])], {1: [1.0] * 40}, tolerance=0.02, alpha=0.01)
    assert [s.n for s in a.positions] == [20, 20]
    assert a.degraded_positions == (1,)
    assert a.positions[1].drop == pytest.approx(0.9) and a.positions[0].drop == 0.0
    assert a.cell_drop == pytest.approx(0.45)
