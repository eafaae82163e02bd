"""Stage 4, analyse: per-position statistics over every scored cell (one Holm family for the
whole run), then the known fault signatures of the failing cells, then one ``CellResult`` per
cell under test. ``merge`` runs the same functions over the union of its shards' scores."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from harness.model.analysis import CellAnalysis, Finding
from harness.model.cell import Cell
from harness.model.limits import EngineLimits, LimitCheck, failing
from harness.model.report import CellResult
from harness.model.scores import CellScores, Levels
from harness.model.vocab import Verdict
from harness.plan import Plan
from harness.verdict.signatures import CellEvidence, match, shortfall
from harness.verdict.statistics import analyze


def harm(scores: CellScores, level: Levels) -> tuple[tuple[float, ...], ...]:
    """Per position and prompt, what the output lost against batch size 1: quality against
    the reference where the prompt has one, else agreement with the baseline."""
    out = []
    for ref_row, base_row in zip(scores.reference, scores.baseline):
        out.append(
            tuple(
                (q1 - q) if not (math.isnan(q) or math.isnan(q1)) else (a1 - a)
                for q, q1, a, a1 in zip(ref_row, level.quality, base_row, level.agreement)
            )
        )
    return tuple(out)


def match_findings(
    analyses: Mapping[Cell, CellAnalysis],
    scores: Mapping[Cell, CellScores],
    levels: Mapping[int, Levels],
    plan: Plan,
    lengths: Sequence[int],
    limits: EngineLimits | None,
) -> dict[Cell, Finding]:
    """Match the failing cells against known fault signatures (harness.verdict.signatures)."""
    if not any(a.verdict == Verdict.FAIL for a in analyses.values()):
        return {}
    evidence = [
        CellEvidence(
            analysis=analysis,
            harm=harm(scores[cell], levels[cell.beam_width]),
            shorter=shortfall(plan, cell, lengths),
            changed=scores[cell].differs,
        )
        for cell, analysis in analyses.items()
    ]
    return match(evidence, limits)


def analyse(
    scores: Mapping[Cell, CellScores],
    levels: Mapping[int, Levels],
    plan: Plan,
    lengths: Sequence[int],
    limits: EngineLimits | None,
    *,
    tolerance: float,
    alpha: float,
    deterministic: bool = False,
) -> tuple[dict[Cell, CellAnalysis], dict[Cell, Finding]]:
    """Every scored cell's analysis, and the signature each failing one matches."""
    analyses = {
        a.cell: a
        for a in analyze(scores, levels, tolerance=tolerance, alpha=alpha, deterministic=deterministic)
    }
    return analyses, match_findings(analyses, scores, levels, plan, lengths, limits)


def cell_result(
    cell: Cell,
    checks: tuple[LimitCheck, ...],
    analysis: CellAnalysis | None,
    error: str | None = None,
    finding: Finding | None = None,
    notice: str | None = None,
) -> CellResult:
    """One cell's result: its analysis (None: the engine could not run it, ``error`` says
    why), the signature its damage matches, its build-limit checks, and the notice of an
    engine that did not run it as asked (such a cell cannot pass: ``untested``)."""
    a = analysis
    if error or a is None:
        verdict = Verdict.ERROR
    elif notice and a.verdict == Verdict.PASS:
        verdict = Verdict.UNTESTED
    else:
        verdict = a.verdict
    return CellResult(
        id=cell.id,
        batch_size=cell.batch_size,
        beam_width=cell.beam_width,
        verdict=verdict,
        limits_verdict=Verdict.FAIL if failing(checks) else Verdict.PASS,
        error=error,
        message=error or (a.message if a else ""),
        cause=finding.cause if finding else None,
        pattern=finding.kind if finding else None,
        evidence=finding.evidence if finding else None,
        baseline_level=a.level if a else None,
        quality=a.quality if a else None,
        quality_bs1=a.quality_bs1 if a else None,
        differing=a.differing if a else None,
        drift=a.drift if a else None,
        degraded_positions=a.degraded_positions if a else (),
        nondeterministic_positions=a.nondeterministic_positions if a else (),
        omnibus=a.omnibus if a else None,
        positions=a.positions if a else (),
        limit_checks=checks,
        notice=notice,
        detectable_drop=a.detectable if a else None,
    )


def cell_results(
    cells: Iterable[Cell],
    checks: Mapping[Cell, tuple[LimitCheck, ...]],
    analyses: Mapping[Cell, CellAnalysis],
    errors: Mapping[Cell, str | None],
    findings: Mapping[Cell, Finding],
    notices: Mapping[Cell, str | None],
) -> tuple[CellResult, ...]:
    """One result per cell under test, in plan order."""
    return tuple(
        cell_result(c, checks[c], analyses.get(c), errors.get(c), findings.get(c), notices.get(c))
        for c in cells
    )
