"""Failure texts for the per-cell tests, with the likely cause where the pattern says it."""

from __future__ import annotations

from collections.abc import Sequence

from harness.limits.preflight import LimitCheck
from harness.results import CellResult, DropTest, PositionStats, Verdict


def likely_cause(result: CellResult) -> str | None:
    """The known fault signature the cell's damage matches (see harness.verdict.signatures), if any."""
    if result.finding is None:
        return None
    return f"likely cause ({result.finding.kind}): {result.finding.text}"


def _test_line(name: str, test: DropTest | None) -> str | None:
    if test is None or not test.flagged:
        return None
    return f"{name} drop {test.drop:.3f} (adjusted p {test.p_adjusted:.2g})"


def position_line(s: PositionStats) -> str:
    """One degraded position: the figures of the three questions and which test flagged it."""
    quality = ("" if s.quality is None else
               f", quality vs references {s.quality:.3f} (batch size 1: {s.quality_bs1:.3f})")
    tests = [t for t in (_test_line("below the other positions:", s.position_test),
                         _test_line("below batch size 1 in quality:", s.quality_test)) if t]
    return (f"  position {s.position}: agreement with the baseline {s.agreement:.3f}{quality}; "
            f"{s.differing:.0%} of outputs differ from batch size 1; " + "; ".join(tests))


def positions_failure(result: CellResult) -> str | None:
    """The positions test's failure message, or None when the cell passes."""
    if result.error:
        return f"{result.cell.id}: engine error: {result.error}"
    a = result.analysis
    if result.verdict == Verdict.UNTESTED and a is not None:
        return f"{result.cell.id}: untested: {result.notice}\n  measured all the same: {a.message}"
    if a is None or a.verdict == Verdict.PASS:
        return None
    lines = [a.message] + ([f"  note: {result.notice}"] if result.notice else [])
    cause = likely_cause(result)
    if cause:
        lines.append(cause)
    lines += [position_line(s) for s in a.positions if s.degraded]
    if a.spread and a.omnibus is not None:
        lines.append(f"  all positions: mean quality drop {a.omnibus.drop:.3f} (adjusted p "
                     f"{a.omnibus.p_adjusted:.2g})")
    return "\n".join(lines)


def limits_failure(checks: Sequence[LimitCheck]) -> str | None:
    """The limits test's failure message, or None when every known limit holds."""
    failures = [c for c in checks if c.status == "fail"]
    if not failures:
        return None
    return "\n".join(f"{c.cell}: {c.message}" for c in failures)


def limits_unknown(checks: Sequence[LimitCheck]) -> bool:
    """True when no limit could be checked (e.g. an hf model has no build limits)."""
    return all(c.status == "unknown" for c in checks)
