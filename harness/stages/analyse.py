"""Stage 4, analyse: per-position statistics over every scored cell (one Holm family for the
whole run), then the known fault signatures of the failing cells, then one ``CellResult`` per
cell under test. ``merge`` runs the same functions over the union of its shards' scores."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from harness.limits.engine_config import EngineLimits
from harness.limits.preflight import LimitCheck
from harness.plan import Cell, Plan
from harness.results import CellAnalysis, CellResult, CellScores, Finding, Verdict
from harness.verdict.signatures import CellEvidence, match, shortfall
from harness.verdict.statistics import analyze


def match_findings(analyses: Mapping[Cell, CellAnalysis], scores: Mapping[Cell, CellScores],
                   levels: Mapping[int, Sequence[float]], plan: Plan, lengths: Sequence[int],
                   limits: EngineLimits | None) -> dict[Cell, Finding]:
    """Match the failing cells against known fault signatures (harness.verdict.signatures)."""
    if not any(a.verdict == Verdict.FAIL for a in analyses.values()):
        return {}
    evidence = []
    for cell, analysis in analyses.items():
        level = levels[cell.beam_width]
        drops = tuple(tuple(lv - s for lv, s in zip(level, row)) for row in scores[cell].baseline)
        evidence.append(CellEvidence(analysis=analysis, drops=drops,
                                     shorter=shortfall(plan, cell, lengths)))
    return match(evidence, limits)


def analyse(scores: Mapping[Cell, CellScores], levels: Mapping[int, Sequence[float]], plan: Plan,
            lengths: Sequence[int], limits: EngineLimits | None, *, tolerance: float,
            alpha: float) -> tuple[dict[Cell, CellAnalysis], dict[Cell, Finding]]:
    """Every scored cell's analysis, and the signature each failing one matches."""
    analyses = {a.cell: a for a in analyze(list(scores.values()), dict(levels),
                                           tolerance=tolerance, alpha=alpha)}
    return analyses, match_findings(analyses, scores, levels, plan, lengths, limits)


def cell_results(cells: Iterable[Cell], checks: Mapping[Cell, tuple[LimitCheck, ...]],
                 analyses: Mapping[Cell, CellAnalysis], errors: Mapping[Cell, str | None],
                 findings: Mapping[Cell, Finding]) -> tuple[CellResult, ...]:
    """One result per cell under test, in plan order."""
    return tuple(CellResult(cell=c, checks=checks[c], analysis=analyses.get(c),
                            error=errors.get(c), finding=findings.get(c)) for c in cells)
