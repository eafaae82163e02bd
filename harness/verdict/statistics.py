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
   Not answered when the dataset has no reference summaries.
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
position is degraded when question 1 or 2 flags it; a cell fails on a degraded position, on
its omnibus test, (--deterministic) on a differing output, or on an output with no text:
every test is relative to batch size 1, so an engine that returns nothing (or what is not
text) at every batch size would pass them all. docs/method.md has the power tables and the
calibration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np
from scipy import stats

from harness.model.analysis import CellAnalysis, DropTest, PositionStats, cell_fails, shown_p
from harness.model.cell import Cell
from harness.model.scores import CellScores, Levels, finite, mean
from harness.model.vocab import Verdict


def one_sided_paired_p(diffs: Sequence[float], tolerance: float) -> float:
    """p-value of H0: mean(diffs) <= tolerance against H1: mean(diffs) > tolerance."""
    n = len(diffs)
    if n < 2:  # one prompt: no sampling noise can be estimated, so nothing is tested
        return 1.0
    mean = math.fsum(diffs) / n
    var = math.fsum((d - mean) ** 2 for d in diffs) / (n - 1)
    if var <= 1e-24:  # every prompt moved by the same amount: no sampling noise to test
        return 0.0 if mean > tolerance else 1.0
    t = (mean - tolerance) / math.sqrt(var / n)
    return float(stats.t.sf(t, n - 1))


def one_sided_welch_p(here: Sequence[float], elsewhere: Sequence[float], tolerance: float) -> float:
    """p-value of H0: mean(elsewhere) - mean(here) <= tolerance (Welch's unequal variances)."""
    n, m = len(here), len(elsewhere)
    if n < 2 or m < 2:
        return 1.0
    mx, my = math.fsum(here) / n, math.fsum(elsewhere) / m
    vx = math.fsum((x - mx) ** 2 for x in here) / (n - 1) / n
    vy = math.fsum((y - my) ** 2 for y in elsewhere) / (m - 1) / m
    if vx + vy <= 1e-24:
        return 0.0 if my - mx > tolerance else 1.0
    df = (vx + vy) ** 2 / (vx**2 / (n - 1) + vy**2 / (m - 1))
    return float(stats.t.sf((my - mx - tolerance) / math.sqrt(vx + vy), df))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def ranges(positions: Sequence[int]) -> str:
    """[2, 3, 4, 7] -> '2–4, 7'."""
    out: list[str] = []
    items = sorted(positions)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}–{items[j]}")
        i = j + 1
    return ", ".join(out)


def mean_ci(xs: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Two-sided t confidence interval of the mean, clipped to [0, 1] like ROUGE-L itself."""
    n = len(xs)
    centre = mean(xs)
    if n < 2:
        return centre, centre
    sd = math.sqrt(math.fsum((x - centre) ** 2 for x in xs) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _test(drops: Sequence[float], tolerance: float) -> DropTest:
    return DropTest(drop=mean(drops), p_value=one_sided_paired_p(drops, tolerance), n=len(drops))


def position_test(agreement: Sequence[Sequence[float]], p: int, tolerance: float) -> DropTest:
    """Question 1 at position p: the agreement of p's prompts below their other positions'."""
    row = agreement[p]
    others = [q for q in range(len(agreement)) if q != p]
    drops = []
    for i, here in enumerate(row):
        if math.isnan(here):
            continue
        rest = finite([agreement[q][i] for q in others])
        if rest:
            drops.append(mean(rest) - here)
    if len(drops) >= 2:
        return _test(drops, tolerance)
    # --rotation sparse: each prompt at one position, so compare prompts here with the others
    here_values = finite(row)
    elsewhere = [x for q in others for x in finite(agreement[q])]
    return DropTest(
        drop=mean(elsewhere) - mean(here_values),
        n=len(here_values),
        p_value=one_sided_welch_p(here_values, elsewhere, tolerance),
    )


def exchangeable_tail(changed_here: Sequence[bool], shares: Sequence[float]) -> float:
    """P(at least as many prompts changed at p as observed) when, within each prompt, which of
    its scored positions changed is a random pick: prompt i changed at p with probability
    ``shares[i]`` (its changed outputs over its positions), independently (a Poisson-binomial
    tail, computed exactly)."""
    observed = sum(changed_here)
    pmf = np.ones(1)
    for q in shares:
        if 0.0 < q < 1.0:
            pmf = np.convolve(pmf, (1.0 - q, q))
        elif q >= 1.0:
            pmf = np.concatenate(([0.0], pmf))
    return float(min(1.0, pmf[observed:].sum()))


def change_test(differs: Sequence[Sequence[float]], agreement: Sequence[Sequence[float]], p: int) -> DropTest:
    """Question 4 at position p: more of p's outputs changed from batch size 1 than at the
    other positions of the same prompts (drop: the excess share), over the outputs that were
    scored (those with an agreement). H0: within a prompt, the positions its changed outputs
    sit at are a random pick, as drift's are; exact (``exchangeable_tail``). --rotation
    sparse: the changed share of p's prompts against the others' (Fisher's exact test)."""
    rows = [
        [math.nan if math.isnan(a) else d for d, a in zip(drow, arow)]
        for drow, arow in zip(differs, agreement)
    ]
    here_row = rows[p]
    others = [q for q in range(len(rows)) if q != p]
    excess, shares, here = [], [], []
    for i, d in enumerate(here_row):
        rest = [] if math.isnan(d) else finite([rows[q][i] for q in others])
        if rest:
            excess.append(d - mean(rest))
            shares.append((d + math.fsum(rest)) / (1 + len(rest)))
            here.append(d > 0)
    if len(excess) >= 2:
        return DropTest(drop=mean(excess), n=len(excess), p_value=exchangeable_tail(here, shares))
    # --rotation sparse: each prompt at one position, so compare prompts here with the others
    at_p = finite(here_row)
    elsewhere = [x for q in others for x in finite(rows[q])]
    drop = mean(at_p) - mean(elsewhere) if at_p and elsewhere else 0.0
    if len(at_p) < 2 or len(elsewhere) < 2:
        return DropTest(drop=drop, p_value=1.0, n=len(at_p))
    changed, total = sum(x > 0 for x in at_p), sum(x > 0 for x in at_p + elsewhere)
    p_value = float(stats.hypergeom.sf(changed - 1, len(at_p) + len(elsewhere), total, len(at_p)))
    return DropTest(drop=drop, p_value=min(1.0, p_value), n=len(at_p))


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


def min_detectable_drop(
    n: int, sd: float, *, tolerance: float, alpha: float, tests: int, power: float = 0.8
) -> float:
    """Smallest true mean drop a position test detects with the given power, Bonferroni-bound
    (Holm is at least as powerful), for a paired-difference standard deviation ``sd``."""
    return tolerance + _t_sum(n, alpha, tests, power) * sd / math.sqrt(n)


@lru_cache(maxsize=1024)
def _t_sum(n: int, alpha: float, tests: int, power: float) -> float:
    return float(stats.t.ppf(1 - alpha / tests, n - 1)) + float(stats.t.ppf(power, n - 1))


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
        quality_test=_test(q_drops, tolerance) if tested and len(q_drops) >= 1 else None,
        change_test=change_test(cs.differs, cs.baseline, p) if tested and cs.differs else None,
    )


@dataclass
class _Family:
    """Every test of the run, so that one Holm correction spans them all."""

    tests: list[DropTest] = field(default_factory=list)

    def add(self, test: DropTest | None) -> int | None:
        if test is None:
            return None
        self.tests.append(test)
        return len(self.tests) - 1

    def settle(self, tolerance: float, alpha: float, family: int | None) -> list[DropTest]:
        """Every test with its adjusted p and flag; ``family`` pads with clean tests (p = 1)."""
        nulls = max(0, (family or 0) - len(self.tests))
        adjusted = holm([t.p_value for t in self.tests] + [1.0] * nulls)
        return [
            replace(t, p_adjusted=adj, flagged=t.drop > tolerance and adj < alpha)
            for t, adj in zip(self.tests, adjusted)
        ]


def _span(values: Sequence[float]) -> str:
    lo, hi = f"{min(values):.2f}", f"{max(values):.2f}"
    return lo if lo == hi else f"{lo}–{hi}"


def _message(
    cell_id: str,
    row: Sequence[PositionStats],
    bad: Sequence[int],
    spread: DropTest | None,
    nondeterministic: Sequence[int],
    level: float,
) -> str:
    """The cell's one-line verdict, naming the positions and the evidence."""
    if bad:
        noun = "position" if len(bad) == 1 else "positions"
        parts = []
        by_quality = [row[p] for p in bad if (t := row[p].quality_test) is not None and t.flagged]
        by_position = [(row[p], t) for p in bad if (t := row[p].position_test) is not None and t.flagged]
        if by_quality:  # a quality test exists only where the position's quality does
            bs1 = mean([s.quality_bs1 for s in by_quality if s.quality_bs1 is not None])
            quality = [s.quality for s in by_quality if s.quality is not None]
            parts.append(f"quality vs references {_span(quality)} vs {bs1:.2f} at batch size 1")
        if by_position:
            worst = max(t.drop for _, t in by_position)
            parts.append(
                f"agreement with the baseline {_span([s.agreement for s, _ in by_position])}"
                f", up to {worst:.2f} below the other positions"
            )
        said = {s.position for s in by_quality} | {s.position for s, _ in by_position}
        by_change = [
            (row[p], t) for p in bad if p not in said and (t := row[p].change_test) is not None and t.flagged
        ]
        if by_change:  # only this test: sparse damage, some prompts hit hard
            parts.append(
                f"{_span([s.differing for s, _ in by_change])} of outputs changed from "
                f"batch size 1, up to {max(t.drop for _, t in by_change):.2f} more than "
                "at the other positions, with a loss there"
            )
        return f"{cell_id}: {noun} {ranges(bad)} degraded ({'; '.join(parts)})"
    if spread is not None:
        return (
            f"{cell_id}: quality against the references drops across positions (mean drop "
            f"{spread.drop:.3f} below batch size 1 over {len(row)} positions, adjusted p "
            f"{shown_p(spread.p_adjusted)}) though no single position is significant alone"
        )
    if nondeterministic:
        share = mean([row[p].differing for p in nondeterministic])
        return (
            f"{cell_id}: outputs differ from batch size 1 at positions {ranges(nondeterministic)} "
            f"({share:.0%} of them there; --deterministic expects every output to equal batch "
            "size 1's)"
        )
    return f"{cell_id}: no degraded position (batch size 1 level {level:.2f})"


def empty_note(cell_id: str, row: Sequence[PositionStats], positions: Sequence[int]) -> str:
    """What a cell with outputs that have no text says: why it cannot pass."""
    share = mean([s.empty for s in row]) if row else 0.0
    return (
        f"{cell_id}: {share:.0%} of outputs have no text ROUGE-L can score (empty, blank, "
        f"only punctuation or symbols, or not text) at position"
        f"{'s' if len(positions) != 1 else ''} {ranges(positions)}: nothing there was "
        "measured, and an engine that returns no text at every batch size passes every test "
        "against batch size 1, so this is a finding, never a pass"
    )


def drift_note(
    cell_id: str,
    differing: float,
    quality: float | None,
    quality_bs1: float | None,
    concentrated: Sequence[int] = (),
) -> str | None:
    """What a cell that changed outputs without losing quality says (a finding, not a failure);
    ``concentrated``: positions where more outputs changed than at the others (their change
    test flagged) without a loss there."""
    if differing <= 0:
        return None
    said = f"{cell_id}: {differing:.0%} of outputs differ from batch size 1"
    if quality is not None and quality_bs1 is not None:
        said += f"; quality against references {quality:.3f} vs {quality_bs1:.3f}"
    if concentrated:
        return said + (
            f"; more of them at position{'s' if len(concentrated) > 1 else ''} "
            f"{ranges(concentrated)} than at the others, without a loss there"
        )
    return said + "; not position-dependent"


Slots = tuple[int | None, int | None, int | None]  # a position's tests in the family


def _settled(
    row: list[PositionStats], slots: list[Slots], done: list[DropTest], deterministic: bool, tolerance: float
) -> list[PositionStats]:
    """The positions with their tests after Holm: degraded where the tests say so."""
    out = []
    for s, (pi, qi, ci) in zip(row, slots):
        settled = replace(
            s,
            position_test=done[pi] if pi is not None else None,
            quality_test=done[qi] if qi is not None else None,
            change_test=done[ci] if ci is not None else None,
            nondeterministic=deterministic and s.differing > 0,
        )
        out.append(replace(settled, degraded=settled.degraded_by(lambda t: t.flagged, tolerance)))
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
    message = _message(cell.id, row, bad, omnibus if shape.spread else None, nondet, agreement)
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
) -> list[CellAnalysis]:
    """Analyse every cell; ``levels[beam_width]`` holds batch size 1's per-prompt levels.

    ``family`` is the size of the Holm family, the tests the run's design makes
    (``harness.verdict.decide.family_size``): tests the design makes that these scores do not
    (other shards' cells, an engine error, a position without two prompts) count as clean
    (p = 1), so a part of a run is corrected as the whole run is."""
    tests = _Family()
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
        omnibus.append(tests.add(_test(drops, tolerance)) if len(drops) >= 2 else None)
        rows.append(row)
        at = [_quality_drops_at(cs, level, p) for p in range(len(cs.baseline))]
        spreads.append([(len(d), _spread(d)) for d in at if len(d) >= 2] if cell.batch_size > 1 else [])
    done = tests.settle(tolerance, alpha, family)
    m = max(len(done), family or 0, 1)
    detectable = [
        max(
            (min_detectable_drop(n, sd, tolerance=tolerance, alpha=alpha, tests=m) for n, sd in spread),
            default=None,
        )
        for spread in spreads
    ]
    return [
        _cell(
            cell,
            levels[cell.beam_width],
            _settled(row, slot, done, deterministic, tolerance),
            done[oi] if oi is not None else None,
            d,
        )
        for cell, row, slot, oi, d in zip(scores, rows, slots, omnibus, detectable)
    ]
