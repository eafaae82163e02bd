"""Signature matching on synthetic evidence (real generations: tests/integration/test_fault_models.py)."""

from __future__ import annotations

from harness.limits.engine_config import EngineLimits
from harness.plan import Cell, make_plan
from harness.results import CellAnalysis, PositionStats
from harness.verdict.signatures import CellEvidence, match, shortfall

LIMITS_8x1 = EngineLimits(layout="unified", max_batch_size=8, max_beam_width=1)
LIMITS_8x4 = EngineLimits(layout="unified", max_batch_size=8, max_beam_width=4)
N = 32


def evidence(cell, damaged, *, share=1.0, shorter=None, drop=0.9):
    hit_until = round(share * N)
    drops = tuple(tuple(drop if p in damaged and i < hit_until else 0.0 for i in range(N))
                  for p in range(cell.batch_size))
    stats = tuple(PositionStats(p, 1 - sum(r) / N, 0.5, sum(r) / N, 0.0, 0.0, N, p in damaged)
                  for p, r in enumerate(drops))
    verdict = "fail" if damaged else "pass"
    analysis = CellAnalysis(cell, 1.0, stats, tuple(sorted(damaged)), verdict, "",
                            cell_drop=0.0, cell_p_adjusted=1.0)
    return CellEvidence(analysis=analysis, drops=drops, shorter=shorter)


def test_overflow_names_both_beam_widths_and_the_flag():
    found = match([evidence(Cell(8, 4), set(range(2, 8))), evidence(Cell(8, 2), set(range(4, 8))),
                   evidence(Cell(8, 1), set())], LIMITS_8x1)
    text = found[Cell(8, 4)].text
    assert found[Cell(8, 4)].kind == found[Cell(8, 2)].kind == "overflow"
    assert text.startswith("positions >= 2 degraded at beam width 4 and positions >= 4 degraded "
                           "at beam width 2: matches KV beam-slot overflow for max_batch_size 8 x "
                           "max_beam_width 1 = 8 slots; rebuild with --max_beam_width 4")


def test_overflow_is_inferred_without_limits():
    found = match([evidence(Cell(8, 4), set(range(2, 8))), evidence(Cell(4, 4), {2, 3})], None)
    assert found[Cell(8, 4)].kind == "overflow" and "8 beam slots (inferred" in found[Cell(8, 4)].text


def test_full_batch_needs_a_smaller_batch_that_passes():
    cells = [evidence(Cell(8, 1), {7}), evidence(Cell(4, 1), set())]
    assert match(cells, LIMITS_8x4)[Cell(8, 1)].kind == "full-batch"
    assert match([evidence(Cell(8, 1), {7})], LIMITS_8x4)[Cell(8, 1)].kind == "single"


def test_padding_is_told_apart_from_position_damage():
    plan = make_plan((4,), (1,), N, seed=0)
    lengths = [50 + (7 * i) % 40 for i in range(N)]
    short = shortfall(plan, Cell(4, 1), lengths)
    drops = tuple(tuple(0.8 if short[p][i] > 0 else 0.0 for i in range(N)) for p in range(4))
    e = evidence(Cell(4, 1), {0, 1, 2, 3}, shorter=short)
    e = CellEvidence(analysis=e.analysis, drops=drops, shorter=short)
    assert match([e], LIMITS_8x4)[Cell(4, 1)].kind == "padding"
    # the same positions, damage independent of length: not padding
    flat = evidence(Cell(4, 1), {0, 1, 2, 3}, shorter=short)
    assert match([flat], LIMITS_8x4)[Cell(4, 1)].kind == "all-positions"


def test_stride_is_beam_only_with_position_0_intact():
    beam = evidence(Cell(4, 2), {1, 2, 3}, share=0.7)
    assert match([beam, evidence(Cell(4, 1), set())], LIMITS_8x4)[Cell(4, 2)].kind == "stride"
    greedy_broken = evidence(Cell(4, 1), {1, 2, 3})
    assert Cell(4, 2) not in match([beam, greedy_broken], LIMITS_8x4)  # no guess


def test_partial_reports_the_share_of_prompts():
    found = match([evidence(Cell(8, 1), {3}, share=0.3)], LIMITS_8x4)[Cell(8, 1)]
    assert found.kind == "partial" and "position 3 degraded, on 31% of prompts" in found.text


def test_spread_and_no_guess():
    e = evidence(Cell(8, 1), set())
    spread = CellEvidence(analysis=CellAnalysis(Cell(8, 1), 1.0, e.analysis.positions, (), "fail",
                                                "", cell_drop=0.04, cell_p_adjusted=0.001,
                                                spread=True), drops=e.drops)
    assert match([spread], LIMITS_8x4)[Cell(8, 1)].kind == "spread"
    # two scattered positions, nothing known: the failure stands without a guessed cause
    assert match([evidence(Cell(8, 1), {2, 5}, share=0.5)], LIMITS_8x4) == {}
