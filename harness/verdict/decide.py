"""One run's decision, from scored cells to the engine's verdict.

The per-position tests of every cell under one Holm family whose size the design fixes (every
test the planned grid makes: a shard is corrected as the whole run, calibrate as the grid it
models), the fault signatures of the failing cells, one ``CellResult`` per cell under test and
where each beam width starts failing. The run (``harness.pipeline``), ``merge`` and
``calibrate`` call ``decide``; nothing else assembles a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.model.analysis import CellAnalysis, EngineWide, Finding
from harness.model.cell import Cell
from harness.model.limits import EngineLimits, LimitCheck, failing
from harness.model.report import Boundary, CellResult, cell_verdict, run_verdict
from harness.model.schedule import ScheduledCell
from harness.model.scores import CellScores, Levels, finite
from harness.model.vocab import Verdict
from harness.verdict.analysis import analyze, pools
from harness.verdict.boundaries import boundaries
from harness.verdict.evidence import CellEvidence, Shortfall
from harness.verdict.follow_up import screen_alpha
from harness.verdict.schedules import Flights, examine, family_p_values, settle
from harness.verdict.signatures import match
from harness.verdict.statistics import ENGINE_SHARE


def family_size(design: Sequence[Cell], references: bool) -> int:
    """The tests a run of ``design`` makes: for every position of every cell with batch size
    > 1 the position test and the changed-outputs test, and with reference summaries the
    quality test, plus one omnibus test per such cell and, over two such cells or more, the
    engine-wide test (weighted with ``ENGINE_SHARE`` of alpha: ``family_weights``)."""
    per_position = 3 if references else 2
    cells = sum(c.batch_size * per_position + references for c in design if c.batch_size > 1)
    return cells + (references and pools(design))


def harm(scores: CellScores, level: Levels) -> tuple[tuple[float, ...], ...]:
    """Per position and prompt, what the output lost against batch size 1: quality against
    the reference where the prompt has one, else agreement with the baseline."""
    return tuple(
        tuple(
            (q1 - q) if not (math.isnan(q) or math.isnan(q1)) else (a1 - a)
            for q, q1, a, a1 in zip(ref_row, level.quality, base_row, level.agreement)
        )
        for ref_row, base_row in zip(scores.reference, scores.baseline)
    )


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
    verdict = cell_verdict(
        error=bool(error) or a is None,
        failed=a is not None and a.verdict == Verdict.FAIL,
        notice=bool(notice),
    )
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


@dataclass(frozen=True)
class Decision:
    """What a run decided: one result per cell under test, in plan order, the engine-wide
    test, where each beam width starts failing, and the size of the Holm family its tests were
    corrected over."""

    cells: tuple[CellResult, ...]
    boundaries: tuple[Boundary, ...]
    family: int
    engine_wide: EngineWide | None = None
    engine_share: float | None = None  # the engine-wide test's share of alpha (None: the design makes none)
    scheduled: tuple[ScheduledCell, ...] = ()  # the in-flight schedules' cells (--schedules)
    schedule_share: float | None = None  # their tests' share of alpha (None: the run asks for none)

    @property
    def verdict(self) -> Verdict:
        return run_verdict(self.cells, self.engine_wide, self.scheduled)


def decide(
    cells: Sequence[Cell],
    scores: Mapping[Cell, CellScores],
    levels: Mapping[int, Levels],
    shortfall: Mapping[Cell, Shortfall],
    limits: EngineLimits | None,
    *,
    design: Sequence[Cell],
    tolerance: float,
    alpha: float,
    deterministic: bool = False,
    checks: Mapping[Cell, tuple[LimitCheck, ...]] | None = None,
    errors: Mapping[Cell, str] | None = None,
    notices: Mapping[Cell, str | None] | None = None,
    follows_up: bool = False,
    partial: frozenset[Cell] = frozenset(),
    flights: Flights | None = None,
) -> Decision:
    """The decision of a run over ``cells`` (the cells under test, in plan order) from their
    scores, batch size 1's levels per beam width and each cell's padding shortfall; ``design``
    is every cell of the run's grid (the Holm family's size); ``checks``, ``errors`` and
    ``notices`` are what the run knows of each cell besides its scores (build limits, engine
    errors, an engine that did not run the cell as asked); ``follows_up``: the design follows
    its sparse screen up (``harness.verdict.follow_up``: the follow-up's scores ride on each
    followed cell's ``CellScores.follow_up``); ``partial``: cells that hold part of their
    rotation (a sequential run stopped them early), named uniform only where the padding the
    part may be too small to test for is ruled out (``harness.verdict.signatures``);
    ``flights``: the scheduled cells, whose tests join the family at their share of alpha."""
    outside = [c.id for c in scores if c not in design]
    if outside:
        raise ValueError(f"cells {', '.join(outside)} are not in the design the Holm family is sized by")
    references = any(finite(level.quality) for level in levels.values())
    size = family_size(design, references)
    pooled = references and pools(design)  # the design makes the engine-wide test
    flights = flights or Flights()
    examined = examine(flights.drives, tolerance)
    run = analyze(
        scores,
        levels,
        tolerance=tolerance,
        alpha=alpha,
        deterministic=deterministic,
        family=size,
        pools_design=pooled,
        follows_up=follows_up,
        scheduled=family_p_values(examined),
        schedule_share=flights.share,
    )
    screen = screen_alpha(alpha, follows_up)
    scheduled = flights.cells(settle(examined, run.scheduled, tolerance, screen, deterministic))
    analyses = {a.cell: a for a in run.cells}
    findings: dict[Cell, Finding] = {}
    if any(a.verdict == Verdict.FAIL for a in analyses.values()):
        evidence = [
            CellEvidence(
                analysis=a,
                harm=harm(scores[cell], levels[cell.beam_width]),
                shorter=shortfall.get(cell),
                changed=scores[cell].differs,
                partial=cell in partial,
            )
            for cell, a in analyses.items()
        ]
        findings = match(evidence, limits)
    checks, errors, notices = checks or {}, errors or {}, notices or {}
    results = tuple(
        cell_result(c, checks.get(c, ()), analyses.get(c), errors.get(c), findings.get(c), notices.get(c))
        for c in cells
    )
    return Decision(
        cells=results,
        boundaries=boundaries(results),
        family=size,
        engine_wide=run.engine_wide,
        engine_share=ENGINE_SHARE if pooled else None,
        scheduled=scheduled,
        schedule_share=flights.share or None,
    )
