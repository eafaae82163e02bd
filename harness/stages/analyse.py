"""Stage 4, analyse: per-position statistics over every scored cell (one Holm family for the
whole run), then the known fault signatures of the failing cells, then one ``CellResult`` per
cell under test. ``merge`` runs the same functions over the union of its shards' scores."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from harness.limits.engine_config import EngineLimits
from harness.limits.preflight import LimitCheck
from harness.plan import Cell, Plan
from harness.results import CellAnalysis, CellResult, CellScores, Finding, Levels, Verdict
from harness.verdict.signatures import CellEvidence, match, shortfall
from harness.verdict.statistics import analyze


def harm(scores: CellScores, level: Levels) -> tuple[tuple[float, ...], ...]:
    """Per position and prompt, what the output lost against batch size 1: quality against
    the reference where the prompt has one, else agreement with the baseline."""
    out = []
    for ref_row, base_row in zip(scores.reference, scores.baseline):
        out.append(tuple(
            (q1 - q) if not (math.isnan(q) or math.isnan(q1)) else (a1 - a)
            for q, q1, a, a1 in zip(ref_row, level.quality, base_row, level.agreement)))
    return tuple(out)


def match_findings(analyses: Mapping[Cell, CellAnalysis], scores: Mapping[Cell, CellScores],
                   levels: Mapping[int, Levels], plan: Plan, lengths: Sequence[int],
                   limits: EngineLimits | None) -> dict[Cell, Finding]:
    """Match the failing cells against known fault signatures (harness.verdict.signatures)."""
    if not any(a.verdict == Verdict.FAIL for a in analyses.values()):
        return {}
    evidence = [CellEvidence(analysis=analysis, harm=harm(scores[cell], levels[cell.beam_width]),
                             shorter=shortfall(plan, cell, lengths))
                for cell, analysis in analyses.items()]
    return match(evidence, limits)


def analyse(scores: Mapping[Cell, CellScores], levels: Mapping[int, Levels], plan: Plan,
            lengths: Sequence[int], limits: EngineLimits | None, *, tolerance: float,
            alpha: float, deterministic: bool = False
            ) -> tuple[dict[Cell, CellAnalysis], dict[Cell, Finding]]:
    """Every scored cell's analysis, and the signature each failing one matches."""
    analyses = {a.cell: a for a in analyze(list(scores.values()), dict(levels),
                                           tolerance=tolerance, alpha=alpha,
                                           deterministic=deterministic)}
    return analyses, match_findings(analyses, scores, levels, plan, lengths, limits)


def cell_results(cells: Iterable[Cell], checks: Mapping[Cell, tuple[LimitCheck, ...]],
                 analyses: Mapping[Cell, CellAnalysis], errors: Mapping[Cell, str | None],
                 findings: Mapping[Cell, Finding]) -> tuple[CellResult, ...]:
    """One result per cell under test, in plan order."""
    return tuple(CellResult(cell=c, checks=checks[c], analysis=analyses.get(c),
                            error=errors.get(c), finding=findings.get(c)) for c in cells)
