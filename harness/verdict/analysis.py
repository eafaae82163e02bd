"""The verdict's three questions, per cell and position, with one Holm family over the run.

For a cell with batch size B > 1, position p and prompt i (the rotation puts every prompt at
every position, so each comparison is paired by prompt and prompt difficulty cancels):

1. Position dependence: is p worse than the other positions of the same cell? The paired
   drop is ``mean_{q != p} a_i(q) - a_i(p)`` with ``a`` the agreement (ROUGE-L against the
   baseline). Benign batch-shape drift that changes outputs alike at every position cancels;
   a slot that breaks does not. (``--rotation sparse`` seats each prompt at one position, so
   there the comparison is between the prompts at p and those elsewhere: Welch's test.)
2. Batch-size quality: is the quality at p (ROUGE-L against the reference summary) lower than
   at batch size 1 for the same prompts? Drift changes outputs, not their quality; damage that
   hits every position alike (which question 1 cannot see) lowers it. A per-cell omnibus test
   of the same form, on each prompt's mean over the positions, catches damage spread thinly.
   Over the whole engine, the same question pooled per prompt over every batched output
   (every cell with batch size > 1, every position) catches damage too mild for any one
   cell, spread over all of them. Not answered when the dataset has no reference summaries.
3. Determinism: the share of outputs that differ from batch size 1's and the agreement with
   the baseline. Always reported; a gate only with ``--deterministic`` (batch-invariant
   engines), where any differing output fails its position.
4. Sparse damage: do more outputs change from batch size 1's at p than at the other positions
   of the same prompts? A fault that hits some prompts hard at one slot barely moves a mean
   drop (most prompts are untouched and the rest vary a lot), but it changes every output it
   hits; drift changes outputs alike at every position. An exact test: under H0 the positions
   a prompt's changed outputs sit at are a random pick (sparse: Fisher's exact test against
   the other positions' prompts). It degrades p only where p's own figures show a loss too
   (agreement below the other positions and, with references, quality below batch size 1,
   each by more than the tolerance): changes without a loss are drift.

A test flags when its mean drop exceeds ``tolerance`` and a one-sided t-test rejects
H0: drop <= tolerance at ``alpha`` after Holm's correction over every test of the run. A
position is degraded when question 1 or 2 flags it; the run fails on the engine-wide test; a cell fails on a degraded position, on
its omnibus test, (--deterministic) on a differing output, or on an output with no text:
every test is relative to batch size 1, so an engine that returns nothing (or what is not
text) at every batch size would pass them all. docs/method.md has the power tables and the
calibration. The tests themselves are in ``harness.verdict.statistics``, what a cell says in
``harness.verdict.messages``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from harness.model.analysis import CellAnalysis, DropTest, EngineWide, PositionStats, RunAnalysis, cell_fails
from harness.model.cell import Cell
from harness.model.scores import CellScores, Levels, finite, mean
from harness.model.vocab import Verdict
from harness.verdict.follow_up import CONFIRM_SHARE, screen_alpha, suspicious
from harness.verdict.messages import cell_message, drift_note, empty_note, engine_message
from harness.verdict.statistics import (
    change_test,
    family_weights,
    joint_holm,
    mean_ci,
    min_detectable_drop,
    paired_test,
    per_test_share,
    position_test,
)


def quality_drops(quality: Sequence[float], bs1: Sequence[float]) -> list[float]:
    """Per prompt seated here and with a reference: batch size 1's quality minus this one's."""
    return [b - q for q, b in zip(quality, bs1) if not math.isnan(q) and not math.isnan(b)]


def _omnibus_drops(reference: Sequence[Sequence[float]], bs1: Sequence[float]) -> list[float]:
    """Per prompt: batch size 1's quality minus its mean quality over the positions it sat at."""
    out = []
    for i, b in enumerate(bs1):
        seen = finite([row[i] for row in reference])
        if seen and not math.isnan(b):
            out.append(b - mean(seen))
    return out


def engine_drops(scores: Mapping[Cell, CellScores], levels: Mapping[int, Levels]) -> list[float]:
    """Per prompt with a reference: the mean, over its batched outputs (every cell with batch
    size > 1, every position it sat at), of batch size 1's quality at the same beam width minus
    the output's. Each output weighs alike; the prompt is the unit the test samples."""
    per_prompt: dict[int, list[float]] = {}
    for cell, cs in scores.items():
        if cell.batch_size == 1:
            continue
        bs1 = levels[cell.beam_width].quality
        for row in cs.reference:
            for i, (q, b) in enumerate(zip(row, bs1)):
                if not (math.isnan(q) or math.isnan(b)):
                    per_prompt.setdefault(i, []).append(b - q)
    return [mean(d) for d in per_prompt.values()]


def pools(cells: Sequence[Cell]) -> bool:
    """Whether a run over ``cells`` makes the engine-wide test: with two batched cells or more
    (over one it would repeat that cell's omnibus test)."""
    return sum(c.batch_size > 1 for c in cells) >= 2


def _spread(drops: Sequence[float]) -> float:
    """The sample standard deviation (0 for fewer than two)."""
    if len(drops) < 2:
        return 0.0
    centre = mean(drops)
    return math.sqrt(math.fsum((d - centre) ** 2 for d in drops) / (len(drops) - 1))


def _quality_drops_at(cs: CellScores, level: Levels, p: int) -> list[float]:
    seen = [i for i, b in enumerate(cs.baseline[p]) if not math.isnan(b)]
    return quality_drops([cs.reference[p][i] for i in seen], [level.quality[i] for i in seen])


def _stats(cell: Cell, cs: CellScores, level: Levels, p: int, tolerance: float) -> PositionStats:
    """One position's figures and (batch size > 1) its two tests, before Holm."""
    base_row, ref_row = cs.baseline[p], cs.reference[p]
    seen = [i for i, b in enumerate(base_row) if not math.isnan(b)]
    agreement = [base_row[i] for i in seen]
    quality = finite([ref_row[i] for i in seen])
    bs1 = finite([level.quality[i] for i in seen if not math.isnan(ref_row[i])])
    differs = finite([cs.differs[p][i] for i in seen]) if cs.differs else []
    empty = finite([cs.empty[p][i] for i in seen]) if cs.empty else []
    tested = cell.batch_size > 1
    q_drops = quality_drops([ref_row[i] for i in seen], [level.quality[i] for i in seen])
    low, high = mean_ci(agreement)
    return PositionStats(
        position=p,
        n=len(seen),
        agreement=mean(agreement),
        ci_low=low,
        ci_high=high,
        agreement_drop=mean([level.agreement[i] - base_row[i] for i in seen]),
        differing=mean(differs) if differs else 0.0,
        empty=mean(empty) if empty else 0.0,
        quality=mean(quality) if quality else None,
        quality_bs1=mean(bs1) if bs1 else None,
        position_test=position_test(cs.baseline, p, tolerance) if tested else None,
        quality_test=paired_test(q_drops, tolerance) if tested and len(q_drops) >= 1 else None,
        change_test=change_test(cs.differs, cs.baseline, p) if tested and cs.differs else None,
    )


def screened(
    scores: Mapping[Cell, CellScores], levels: Mapping[int, Levels], tolerance: float
) -> dict[Cell, list[PositionStats]]:
    """Every cell's positions with their tests before any correction: what the follow-up of a
    sparse screen chooses by (``harness.verdict.follow_up.choose``)."""
    return {
        cell: [_stats(cell, cs, levels[cell.beam_width], p, tolerance) for p in range(len(cs.baseline))]
        for cell, cs in scores.items()
        if cell.beam_width in levels
    }


@dataclass
class _Family:
    """Every test of the run, so that one Holm correction spans them all."""

    tests: list[DropTest] = field(default_factory=list)

    def add(self, test: DropTest | None) -> int | None:
        if test is None:
            return None
        self.tests.append(test)
        return len(self.tests) - 1

    def settle(
        self,
        tolerance: float,
        alpha: float,
        family: int | None = None,
        engine: int | None = None,
        pooled: bool = False,
        scheduled: Sequence[float] = (),
        share: float = 0.0,
    ) -> tuple[list[DropTest], list[float]]:
        """Every test with its adjusted p and flag; ``family`` pads with clean tests (p = 1);
        ``engine``: the engine-wide test's index, weighted by ``family_weights``; ``pooled``:
        the design makes one, so where these scores do not, a clean test takes its weight.
        ``scheduled``: the p-values of the scheduled cells' tests, in the family at ``share``
        of alpha (``joint_holm``), whose adjusted p-values come back second."""
        nulls = max(0, (family or 0) - len(self.tests))
        p_values = [t.p_value for t in self.tests] + [1.0] * nulls
        weights = family_weights(len(self.tests), len(p_values), engine, pooled)
        adjusted, others = joint_holm(p_values, weights, scheduled, share)
        tests = [
            replace(t, p_adjusted=adj, flagged=t.drop > tolerance and adj < alpha)
            for t, adj in zip(self.tests, adjusted)
        ]
        return tests, others


Slots = tuple[int | None, int | None, int | None]  # a position's tests in the family


def _follow(
    cell: Cell, cs: CellScores, level: Levels, row: list[PositionStats], tolerance: float, again: _Family
) -> dict[int, tuple[PositionStats, Slots]]:
    """A followed cell's suspicious positions (by the screen's tests, before Holm) with their
    figures and tests over the follow-up's outputs alone, added to the follow-up's family."""
    if cs.follow_up is None:
        return {}
    out = {}
    for p in suspicious(row, tolerance):
        s = _stats(cell, cs.follow_up, level, p, tolerance)
        out[p] = (s, (again.add(s.position_test), again.add(s.quality_test), again.add(s.change_test)))
    return out


def _with_tests(s: PositionStats, slots: Slots, done: list[DropTest], tolerance: float) -> PositionStats:
    """A position with its tests after Holm, degraded where they say so."""
    pi, qi, ci = slots
    settled = replace(
        s,
        position_test=done[pi] if pi is not None else None,
        quality_test=done[qi] if qi is not None else None,
        change_test=done[ci] if ci is not None else None,
    )
    return replace(settled, degraded=settled.degraded_by(lambda t: t.flagged, tolerance))


def _settled(
    row: list[PositionStats],
    slots: list[Slots],
    done: list[DropTest],
    deterministic: bool,
    tolerance: float,
    follow: Mapping[int, tuple[PositionStats, Slots]],
    confirmed: list[DropTest],
) -> list[PositionStats]:
    """The positions with their tests after Holm: degraded where the screen's tests say so,
    or the follow-up's (``follow``: a suspicious position's follow-up figures and their slots
    in the follow-up's family, ``confirmed`` once settled)."""
    out = []
    for s, slot in zip(row, slots):
        settled = replace(
            _with_tests(s, slot, done, tolerance), nondeterministic=deterministic and s.differing > 0
        )
        if s.position in follow:
            again = _with_tests(*follow[s.position], confirmed, tolerance)
            settled = replace(settled, follow_up=again, degraded=settled.degraded or again.degraded)
        out.append(settled)
    return out


def _cell(
    cell: Cell, level: Levels, row: list[PositionStats], omnibus: DropTest | None, detectable: float | None
) -> CellAnalysis:
    flagged = omnibus is not None and omnibus.flagged
    agreement = mean(level.agreement)
    # the verdict and its message come from what the positions and the omnibus test show
    shape = CellAnalysis(
        cell=cell,
        level=agreement,
        positions=tuple(row),
        verdict=Verdict.PASS,
        message="",
        omnibus=omnibus,
        detectable=detectable,
    )
    bad, nondet = shape.degraded_positions, shape.nondeterministic_positions
    empty = shape.empty_positions
    failed = cell_fails(bool(bad), flagged, bool(nondet), bool(empty))
    concentrated = [s.position for s in row if s.change_test is not None and s.change_test.flagged]
    message = cell_message(cell.id, row, bad, omnibus if shape.spread else None, nondet, agreement)
    if empty:  # the first thing to say; what else failed follows
        other = message.removeprefix(f"{cell.id}: ")
        message = empty_note(cell.id, row, empty) + (f"; also {other}" if bad or flagged or nondet else "")
    return replace(
        shape,
        verdict=Verdict.FAIL if failed else Verdict.PASS,
        message=message,
        drift=None
        if failed
        else drift_note(cell.id, shape.differing, shape.quality, shape.quality_bs1, concentrated),
    )


def analyze(
    scores: Mapping[Cell, CellScores],
    levels: Mapping[int, Levels],
    *,
    tolerance: float,
    alpha: float,
    deterministic: bool = False,
    family: int | None = None,
    pools_design: bool = False,
    follows_up: bool = False,
    scheduled: Sequence[float] = (),
    schedule_share: float = 0.0,
) -> RunAnalysis:
    """Analyse every cell and the engine as a whole; ``levels[beam_width]`` holds batch size
    1's per-prompt levels.

    ``family`` is the size of the Holm family, the tests the run's design makes
    (``harness.verdict.decide.family_size``): tests the design makes that these scores do not
    (other shards' cells, an engine error, a position without two prompts) count as clean
    (p = 1), so a part of a run is corrected as the whole run is; ``pools_design``: the design
    makes the engine-wide test (its weight stays its own where these scores do not make it);
    ``follows_up``: the design follows up a sparse screen (``harness.verdict.follow_up``), so
    the screen's family is corrected at its share of alpha and the suspicious positions of the
    cells with follow-up scores are tested again over those, in a family of their own;
    ``scheduled``: the p-values of the scheduled cells' tests (``harness.verdict.schedules``),
    in the screen's family at ``schedule_share`` of its alpha, adjusted in the result."""
    tests, again = _Family(), _Family()
    follow: list[dict[int, tuple[PositionStats, Slots]]] = []
    rows: list[list[PositionStats]] = []
    slots: list[list[Slots]] = []
    omnibus: list[int | None] = []
    spreads: list[list[tuple[int, float]]] = []  # per cell: (n, sd) of each position's drops
    for cell, cs in scores.items():
        level = levels[cell.beam_width]
        row = [_stats(cell, cs, level, p, tolerance) for p in range(len(cs.baseline))]
        slots.append(
            [(tests.add(s.position_test), tests.add(s.quality_test), tests.add(s.change_test)) for s in row]
        )
        drops = _omnibus_drops(cs.reference, level.quality) if cell.batch_size > 1 else []
        omnibus.append(tests.add(paired_test(drops, tolerance)) if len(drops) >= 2 else None)
        rows.append(row)
        follow.append(_follow(cell, cs, level, row, tolerance, again))
        at = [_quality_drops_at(cs, level, p) for p in range(len(cs.baseline))]
        spreads.append([(len(d), _spread(d)) for d in at if len(d) >= 2] if cell.batch_size > 1 else [])
    everywhere = engine_drops(scores, levels) if pools(list(scores)) else []
    engine = tests.add(paired_test(everywhere, tolerance)) if len(everywhere) >= 2 else None
    pooled = engine is not None or pools_design
    screen = screen_alpha(alpha, follows_up)
    done, on_schedule = tests.settle(tolerance, screen, family, engine, pooled, scheduled, schedule_share)
    confirmed, _ = again.settle(tolerance, alpha * CONFIRM_SHARE)
    share = per_test_share(max(len(done), family or 0, 1), pooled, schedule_share)
    detectable = [
        max(
            (min_detectable_drop(n, sd, tolerance=tolerance, alpha=screen, share=share) for n, sd in spread),
            default=None,
        )
        for spread in spreads
    ]
    cells = tuple(
        _cell(
            cell,
            levels[cell.beam_width],
            _settled(row, slot, done, deterministic, tolerance, fu, confirmed),
            done[oi] if oi is not None else None,
            d,
        )
        for cell, row, slot, oi, d, fu in zip(scores, rows, slots, omnibus, detectable, follow)
    )
    if engine is None:
        return RunAnalysis(cells, scheduled=tuple(on_schedule))
    test, batched = done[engine], tuple(c.id for c in scores if c.batch_size > 1)
    failed = any(a.verdict == Verdict.FAIL for a in cells)
    wide = EngineWide(test, batched, engine_message(test, batched, failed, tolerance))
    return RunAnalysis(cells, wide, tuple(on_schedule))
