"""Clean cells for tests that need a report's cell without running anything: a batch position
whose outputs are batch size 1's, and a cell result made of such positions as the harness
makes it (harness.verdict.decide.cell_result), but for the damage, error or notice a test
gives."""

from __future__ import annotations

from harness.model.analysis import CellAnalysis, PositionStats
from harness.model.cell import Cell
from harness.model.report import CellResult
from harness.model.vocab import Verdict
from harness.verdict.decide import cell_result


def clean_position(position: int, n: int = 8, quality: float = 0.6, degraded: bool = False) -> PositionStats:
    """Position ``position`` over ``n`` prompts: every output as batch size 1's, at
    ``quality`` as at batch size 1 (``degraded``: flagged all the same)."""
    return PositionStats(
        position=position,
        n=n,
        agreement=1.0,
        ci_low=None,
        ci_high=None,
        agreement_drop=0.0,
        differing=0.0,
        quality=quality,
        quality_bs1=quality,
        degraded=degraded,
    )


def clean_cell(
    cell: Cell,
    *,
    quality: float = 0.6,
    degraded: tuple[int, ...] = (),
    error: str | None = None,
    notice: str | None = None,
) -> CellResult:
    """``cell``'s result over clean positions at ``quality``, within the build limits; it
    fails on its ``degraded`` positions, is an engine error with ``error``, and is untested
    with a ``notice`` (the engine did not run it as asked)."""
    stats = tuple(clean_position(p, quality=quality, degraded=p in degraded) for p in range(cell.batch_size))
    analysis = CellAnalysis(cell, 1.0, stats, Verdict.FAIL if degraded else Verdict.PASS, "")
    return cell_result(cell, (), None if error else analysis, error, notice=notice)
