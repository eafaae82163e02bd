"""Failure texts for the per-cell tests, with the likely cause where the pattern says it."""

from __future__ import annotations

from collections.abc import Sequence

from harness.model.analysis import DropTest, EngineWide, PositionStats, shown_p
from harness.model.limits import LimitCheck, failing
from harness.model.report import CellResult
from harness.model.schedule import ScheduledCell
from harness.model.vocab import CheckStatus, Verdict


def _test_line(name: str, test: DropTest | None, what: str = "drop") -> str | None:
    if test is None or not test.flagged:
        return None
    return f"{name} {what} {test.drop:.3f} (adjusted p {shown_p(test.p_adjusted)})"


def position_line(s: PositionStats) -> str:
    """One degraded position: the figures of the three questions and which test flagged it."""
    quality = (
        ""
        if s.quality is None
        else f", quality vs references {s.quality:.3f} (batch size 1: {s.quality_bs1:.3f})"
    )
    tests = [
        t
        for t in (
            _test_line("below the other positions:", s.position_test),
            _test_line("below batch size 1 in quality:", s.quality_test),
            _test_line("more outputs changed than at the other positions:", s.change_test, "share"),
        )
        if t
    ]
    return (
        f"  position {s.position}: agreement with the baseline {s.agreement:.3f}{quality}; "
        f"{s.differing:.0%} of outputs differ from batch size 1; " + "; ".join(tests)
    )


def positions_failure(result: CellResult) -> str | None:
    """The positions test's failure message, or None when the cell passes."""
    if result.error is not None or result.verdict == Verdict.ERROR:
        return f"{result.id}: engine error: {result.error}"
    if result.verdict == Verdict.UNTESTED:
        return f"{result.id}: untested: {result.notice}\n  measured all the same: {result.message}"
    if result.verdict == Verdict.PASS:
        return None
    lines = [result.message] + ([f"  note: {result.notice}"] if result.notice else [])
    if result.cause:
        lines.append(result.cause)
    lines += [position_line(s) for s in result.positions if s.degraded]
    omnibus = result.omnibus
    if omnibus is not None and omnibus.flagged and not result.degraded_positions:
        lines.append(
            f"  all positions: mean quality drop {omnibus.drop:.3f} (adjusted p "
            f"{shown_p(omnibus.p_adjusted)})"
        )
    return "\n".join(lines)


def engine_failure(engine: EngineWide) -> str | None:
    """The engine-wide test's failure message, or None when it passes."""
    return engine.message if engine.failed else None


def limits_failure(checks: Sequence[LimitCheck]) -> str | None:
    """The limits test's failure message, or None when every known limit holds."""
    return "\n".join(f"{c.cell}: {c.message}" for c in failing(checks)) or None


def preflight_line(checks: Sequence[LimitCheck], see: str) -> str | None:
    """The line printed before generating when cells exceed build limits (None: none do)."""
    failed = failing(checks)
    if not failed:
        return None
    cells = sorted({c.cell for c in failed})
    return (
        f"preflight: build limits exceeded in {len(cells)} cell{'s' if len(cells) != 1 else ''} "
        f"({', '.join(cells)}); {see}. First: {failed[0].message}"
    )


def limits_unknown(checks: Sequence[LimitCheck]) -> bool:
    """True when no limit could be checked (e.g. an hf model has no build limits)."""
    return all(c.status == CheckStatus.UNKNOWN for c in checks)


def schedule_failure(cell: ScheduledCell) -> str | None:
    """A scheduled cell's failure message (it failed, raised, or its schedule did not happen),
    or None when it passed or cannot run on this engine (the test skips with the reason)."""
    if cell.verdict in (Verdict.PASS, Verdict.NOT_APPLICABLE):
        return None
    lines = [f"{cell.id}: {cell.verdict}: {cell.message}"]
    if cell.separation:
        lines.append(f"  {cell.separation}")
    if cell.damaged:
        lines.append(f"  damaged requests: {', '.join(cell.damaged)}")
    return "\n".join(lines)
