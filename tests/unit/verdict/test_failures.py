from __future__ import annotations

from harness.limits.engine_config import EngineLimits, overflow_positions
from harness.limits.preflight import LimitCheck
from harness.plan import Cell
from harness.results import CellAnalysis, CellResult, DropTest, Finding, PositionStats
from harness.verdict.failures import (
    likely_cause,
    limits_failure,
    limits_unknown,
    positions_failure,
)

LIMITS = EngineLimits(layout="unified", max_batch_size=8, max_beam_width=1, max_input_len=384,
                      max_seq_len=512)


def test_overflow_positions_follow_the_slot_arithmetic():
    assert overflow_positions(8, 4, LIMITS.beam_slots) == (2, 3, 4, 5, 6, 7)
    assert overflow_positions(8, 2, LIMITS.beam_slots) == (4, 5, 6, 7)
    assert overflow_positions(4, 4, LIMITS.beam_slots) == (2, 3)
    assert overflow_positions(2, 4, LIMITS.beam_slots) == ()
    assert overflow_positions(8, 4, EngineLimits(layout="legacy", max_batch_size=8).beam_slots) == ()


def _test(drop, flagged):
    return DropTest(drop=drop, p_value=0.0, n=64, p_adjusted=1e-6 if flagged else 1.0,
                      flagged=flagged)


def _stats(p, bad):
    return PositionStats(position=p, n=64, agreement=0.1 if bad else 1.0,
                         agreement_drop=0.9 if bad else 0.0, differing=1.0 if bad else 0.0,
                         quality=0.1 if bad else 0.6, quality_bs1=0.6,
                         position_test=_test(0.8 if bad else 0.0, bad),
                         quality_test=_test(0.5 if bad else 0.0, bad))


def _result(cell, degraded, error=None, finding=None):
    stats = tuple(_stats(p, p in degraded) for p in range(cell.batch_size))
    analysis = CellAnalysis(cell, 1.0, stats, tuple(degraded), "fail" if degraded else "pass",
                            f"{cell.id}: positions ... degraded")
    return CellResult(cell=cell, checks=(), analysis=None if error else analysis, error=error,
                      finding=finding)


def test_cause_is_the_matched_signature():
    finding = Finding("overflow", "positions >= 2 degraded at beam width 4: matches ...")
    assert likely_cause(_result(Cell(8, 4), [2, 3], finding=finding)) == \
        "likely cause (overflow): positions >= 2 degraded at beam width 4: matches ..."
    assert likely_cause(_result(Cell(8, 1), [3])) is None


def test_positions_failure_texts():
    assert positions_failure(_result(Cell(8, 4), [])) is None
    text = positions_failure(_result(Cell(8, 4), [2, 3, 4, 5, 6, 7]))
    assert "position 7: agreement with the baseline 0.100, quality vs references 0.100 (batch size " \
        "1: 0.600); 100% of outputs differ from batch size 1; below the other positions: drop " \
        "0.800" in text
    assert positions_failure(_result(Cell(4, 2), [], error="RuntimeError: boom")) == \
        "bs4-beam2: engine error: RuntimeError: boom"


def test_a_cell_failed_by_the_omnibus_test_alone_fails_its_test():
    cell = Cell(8, 1)
    stats = tuple(_stats(p, False) for p in range(8))
    analysis = CellAnalysis(cell, 1.0, stats, (), "fail", "bs8-beam1: quality drops across ...",
                            omnibus=_test(0.05, True), spread=True)
    text = positions_failure(CellResult(cell=cell, checks=(), analysis=analysis))
    assert text.startswith("bs8-beam1: quality drops across") and "mean quality drop 0.050" in text


def test_limits_texts():
    checks = (LimitCheck("bs8-beam4", "max_beam_width", "fail", "num_beams 4 exceeds ..."),
              LimitCheck("bs8-beam4", "max_batch_size", "pass", "ok"))
    assert limits_failure(checks) == "bs8-beam4: num_beams 4 exceeds ..."
    assert not limits_unknown(checks)
    assert limits_unknown((LimitCheck("c", "max_seq_len", "unknown", "?"),))
