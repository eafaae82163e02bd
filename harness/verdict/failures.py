"""Failure texts for the per-cell tests, with the likely cause where the pattern says it."""

from __future__ import annotations

from collections.abc import Sequence

from harness.limits.preflight import LimitCheck
from harness.results import CellResult, Verdict


def likely_cause(result: CellResult) -> str | None:
    """The known fault signature the cell's damage matches (see harness.verdict.signatures), if any."""
    if result.finding is None:
        return None
    return f"likely cause ({result.finding.kind}): {result.finding.text}"


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
    for s in a.positions:
        if s.degraded:
            lines.append(f"  position {s.position}: ROUGE-L {s.rouge_l:.3f} (drop {s.drop:.3f}, "
                         f"adjusted p {s.p_adjusted:.2g}), vs reference {s.rouge_l_reference:.3f}")
    if a.spread and a.cell_drop is not None:
        lines.append(f"  all positions: mean drop {a.cell_drop:.3f} (adjusted p "
                     f"{a.cell_p_adjusted:.2g})")
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
