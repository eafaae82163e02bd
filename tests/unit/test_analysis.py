from __future__ import annotations

import random

import pytest
from scipy import stats

from harness.analysis import CellScores, analyze, holm, one_sided_paired_p, ranges
from harness.plan import Cell


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
