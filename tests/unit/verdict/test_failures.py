from __future__ import annotations

from collections.abc import Collection

from harness.model.analysis import CellAnalysis, DropTest, Finding, PositionStats
from harness.model.cell import Cell
from harness.model.limits import EngineLimits, LimitCheck, overflow_positions
from harness.model.report import CellResult
from harness.model.vocab import CheckStatus, FindingKind, Layout, Verdict
from harness.verdict.decide import cell_result
from harness.verdict.failures import limits_failure, limits_unknown, positions_failure

LIMITS = EngineLimits(
    layout=Layout.UNIFIED, max_batch_size=8, max_beam_width=1, max_input_len=384, max_seq_len=512
)


def test_overflow_positions_follow_the_slot_arithmetic() -> None:
    assert overflow_positions(8, 4, LIMITS.beam_slots) == (2, 3, 4, 5, 6, 7)
    assert overflow_positions(8, 2, LIMITS.beam_slots) == (4, 5, 6, 7)
    assert overflow_positions(4, 4, LIMITS.beam_slots) == (2, 3)
    assert overflow_positions(2, 4, LIMITS.beam_slots) == ()
    assert overflow_positions(8, 4, EngineLimits(layout=Layout.LEGACY, max_batch_size=8).beam_slots) == ()


def _test(drop: float, flagged: bool) -> DropTest:
    return DropTest(drop=drop, p_value=0.0, n=64, p_adjusted=1e-6 if flagged else 1.0, flagged=flagged)


def _stats(p: int, bad: bool) -> PositionStats:
    return PositionStats(
        position=p,
        n=64,
        agreement=0.1 if bad else 1.0,
        ci_low=None,
        ci_high=None,
        agreement_drop=0.9 if bad else 0.0,
        differing=1.0 if bad else 0.0,
        quality=0.1 if bad else 0.6,
        quality_bs1=0.6,
        position_test=_test(0.8 if bad else 0.0, bad),
        quality_test=_test(0.5 if bad else 0.0, bad),
        degraded=bad,
    )


def _result(
    cell: Cell,
    degraded: Collection[int],
    error: str | None = None,
    finding: Finding | None = None,
    notice: str | None = None,
) -> CellResult:
    stats = tuple(_stats(p, p in degraded) for p in range(cell.batch_size))
    analysis = CellAnalysis(
        cell, 1.0, stats, Verdict.FAIL if degraded else Verdict.PASS, f"{cell.id}: positions ... degraded"
    )
    return cell_result(cell, (), None if error else analysis, error, finding, notice)


def test_cause_is_the_matched_signature() -> None:
    finding = Finding(FindingKind.OVERFLOW, "positions >= 2 degraded at beam width 4: matches ...")
    result = _result(Cell(8, 4), [2, 3], finding=finding)
    assert result.cause == "likely cause (overflow): positions >= 2 degraded at beam width 4: matches ..."
    assert result.pattern == FindingKind.OVERFLOW and result.degraded_positions == (2, 3)
    assert _result(Cell(8, 1), [3]).cause is None


def test_positions_failure_texts() -> None:
    assert positions_failure(_result(Cell(8, 4), [])) is None
    text = positions_failure(_result(Cell(8, 4), [2, 3, 4, 5, 6, 7]))
    assert text is not None
    assert (
        "position 7: agreement with the baseline 0.100, quality vs references 0.100 (batch size "
        "1: 0.600); 100% of outputs differ from batch size 1; below the other positions: drop "
        "0.800" in text
    )
    assert (
        positions_failure(_result(Cell(4, 2), [], error="RuntimeError: boom"))
        == "bs4-beam2: engine error: RuntimeError: boom"
    )


def test_a_cell_the_engine_did_not_run_as_asked_is_untested_and_fails_its_test() -> None:
    result = _result(Cell(4, 1), [], notice="not batched")
    assert result.verdict == Verdict.UNTESTED and result.message == "bs4-beam1: positions ... degraded"
    assert result.headline == "bs4-beam1: not batched (bs4-beam1: positions ... degraded)"
    assert positions_failure(result) == (
        "bs4-beam1: untested: not batched\n  measured all the same: bs4-beam1: positions ... degraded"
    )


def test_a_cell_failed_by_the_omnibus_test_alone_fails_its_test() -> None:
    cell = Cell(8, 1)
    stats = tuple(_stats(p, False) for p in range(8))
    analysis = CellAnalysis(
        cell, 1.0, stats, Verdict.FAIL, "bs8-beam1: quality drops across ...", omnibus=_test(0.05, True)
    )
    assert analysis.spread
    text = positions_failure(cell_result(cell, (), analysis))
    assert text is not None
    assert text.startswith("bs8-beam1: quality drops across") and "mean quality drop 0.050" in text


def test_limits_texts() -> None:
    checks = (
        LimitCheck("bs8-beam4", "max_beam_width", CheckStatus.FAIL, "num_beams 4 exceeds ..."),
        LimitCheck("bs8-beam4", "max_batch_size", CheckStatus.PASS, "ok"),
    )
    assert limits_failure(checks) == "bs8-beam4: num_beams 4 exceeds ..."
    assert limits_failure(checks[1:]) is None
    assert not limits_unknown(checks)
    assert limits_unknown((LimitCheck("c", "max_seq_len", CheckStatus.UNKNOWN, "?"),))
    assert cell_result(Cell(8, 4), checks, None, "boom").limits_verdict == Verdict.FAIL


def test_p_values_below_what_the_report_keeps_are_never_shown_as_zero() -> None:
    from harness.model.analysis import shown_p

    assert [shown_p(p) for p in (0.0, 1e-15, 0.0031, 0.5, None)] == [
        "< 1e-12",
        "< 1e-12",
        "0.0031",
        "0.5",
        "–",
    ]
    text = positions_failure(_result(Cell(8, 4), [7]))
    assert text is not None and "(adjusted p 1e-06)" in text
