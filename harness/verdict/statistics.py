"""Per-position statistics and the degraded-position decision.

For a cell with batch size B > 1 and position p, each prompt i contributes the paired
difference d_i = s1_i - s_{p,i}, where s1_i is the prompt's ROUGE-L against the baseline at
batch size 1 (same beam width) and s_{p,i} the same at position p. The rotation plan puts
every prompt at every position once, so the pairs cancel prompt difficulty. A position is
degraded when mean(d) > tolerance *and* a one-sided paired t-test rejects
H0: mean(d) <= tolerance at level alpha after Holm's correction over every test in the run.

Besides the positions, every cell gets one omnibus test of the same form on the per-prompt
mean drop over all of its positions, so that damage spread thinly over many positions (none
significant alone) still fails the cell. Its p-value joins the same Holm family.
docs/method.md explains the method and its calibration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats

from harness.results import CellAnalysis, CellScores, PositionStats, Verdict


def one_sided_paired_p(diffs: Sequence[float], tolerance: float) -> float:
    """p-value of H0: mean(diffs) <= tolerance against H1: mean(diffs) > tolerance."""
    n = len(diffs)
    mean = math.fsum(diffs) / n
    if n < 2:  # one prompt: no sampling noise can be estimated, so nothing is tested
        return 1.0
    var = math.fsum((d - mean) ** 2 for d in diffs) / (n - 1)
    if var <= 1e-24:  # every prompt moved by the same amount: no sampling noise to test
        return 0.0 if mean > tolerance else 1.0
    t = (mean - tolerance) / math.sqrt(var / n)
    return float(stats.t.sf(t, n - 1))


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


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs) if xs else float("nan")


def mean_ci(xs: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Two-sided t confidence interval of the mean, clipped to [0, 1] like ROUGE-L itself."""
    n = len(xs)
    mean = _mean(xs)
    if n < 2:
        return mean, mean
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return max(0.0, mean - half), min(1.0, mean + half)


def analyze(scores: Sequence[CellScores], level_scores: dict[int, Sequence[float]], *,
            tolerance: float, alpha: float, family: int | None = None) -> list[CellAnalysis]:
    """Analyse every cell; ``level_scores[beam_width]`` holds batch size 1's per-prompt scores.

    ``family`` (calibrate only) sizes the Holm family as if a larger grid had been run whose
    other tests all came out clean (p = 1): the correction of that grid, for these cells."""
    tests: list[tuple[int, int, float]] = []  # (cell index, position or -1 for the cell, p)
    drafts: list[list[PositionStats]] = []
    omnibus: dict[int, float] = {}  # cell index -> mean drop over positions
    for ci, cs in enumerate(scores):
        level = level_scores[cs.cell.beam_width]
        stats_row = []
        if cs.cell.batch_size > 1:
            per_prompt = []
            for i in range(len(level)):
                seen = [row[i] for row in cs.baseline if not math.isnan(row[i])]
                if seen:  # every prompt is seen somewhere, unless the cell is empty
                    per_prompt.append(level[i] - math.fsum(seen) / len(seen))
            omnibus[ci] = _mean(per_prompt)
            tests.append((ci, -1, one_sided_paired_p(per_prompt, tolerance)))
        for p, (base_row, ref_row) in enumerate(zip(cs.baseline, cs.reference)):
            # NaN marks prompts that never sat at this position (--rotation sparse)
            seen_at = [i for i, b in enumerate(base_row) if not math.isnan(b)]
            base = [base_row[i] for i in seen_at]
            ref = [ref_row[i] for i in seen_at]
            diffs = [level[i] - base_row[i] for i in seen_at]
            p_value = None
            if cs.cell.batch_size > 1:
                p_value = one_sided_paired_p(diffs, tolerance)
                tests.append((ci, p, p_value))
            low, high = mean_ci(base)
            stats_row.append(PositionStats(position=p, rouge_l=_mean(base),
                                           rouge_l_reference=_mean(ref), drop=_mean(diffs),
                                           p_value=p_value, p_adjusted=None, n=len(base),
                                           ci_low=low, ci_high=high))
        drafts.append(stats_row)
    nulls = max(0, (family or 0) - len(tests))
    adjusted = holm([t[2] for t in tests] + [1.0] * nulls)[:len(tests)]
    cell_adjusted: dict[int, float] = {}
    for (ci, p, _), adj in zip(tests, adjusted):
        if p < 0:
            cell_adjusted[ci] = adj
            continue
        s = drafts[ci][p]
        degraded = s.drop > tolerance and adj < alpha
        drafts[ci][p] = PositionStats(**{**s.__dict__, "p_adjusted": adj, "degraded": degraded})

    results = []
    for ci, (cs, row) in enumerate(zip(scores, drafts)):
        level = _mean(level_scores[cs.cell.beam_width])
        bad = tuple(s.position for s in row if s.degraded)
        drop, adj = omnibus.get(ci), cell_adjusted.get(ci)
        spread = drop is not None and adj is not None and drop > tolerance and adj < alpha
        if bad:
            lo = min(row[p].rouge_l for p in bad)
            hi = max(row[p].rouge_l for p in bad)
            span = f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}"
            noun = "position" if len(bad) == 1 else "positions"
            message = (f"{cs.cell.id}: {noun} {ranges(bad)} degraded (ROUGE-L {span} vs "
                       f"{level:.2f} at batch size 1)")
        elif spread:
            message = (f"{cs.cell.id}: quality drops across positions (mean drop {drop:.3f} over "
                       f"{len(row)} positions, adjusted p {adj:.2g}) though no single position "
                       "is significant alone")
        else:
            message = f"{cs.cell.id}: no degraded position (batch size 1 level {level:.2f})"
        results.append(CellAnalysis(cell=cs.cell, level=level, positions=tuple(row),
                                    degraded_positions=bad,
                                    verdict=Verdict.FAIL if bad or spread else Verdict.PASS,
                                    message=message, cell_drop=drop, cell_p_adjusted=adj,
                                    spread=spread))
    return results
