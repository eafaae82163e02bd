"""The statistical tests the verdict rests on, and the per-position tests built from them.

One-sided paired and Welch p-values, Holm's step-down correction, the exact tail of the
changed-outputs test, the t confidence interval of a mean and the smallest drop a run can
detect; ``position_test`` (question 1: a position below the others of its cell) and
``change_test`` (question 4: more changed outputs there than at the others) apply them to one
position's scores. ``harness.verdict.analysis`` runs them for every cell under one Holm
family; docs/method.md has the power tables and the calibration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy import stats

from harness.model.analysis import DropTest
from harness.model.scores import finite, mean


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


ENGINE_SHARE = 0.1  # the share of alpha the engine-wide test is weighted with (docs/method.md)
# the share of alpha the scheduled cells' tests hold in the run's one Holm family, where the
# run makes them (--schedules); the bulk cells' tests hold the rest (docs/method.md)
SCHEDULE_SHARE = 0.1


def confined_p(damaged_outside: int, outside: int, damaged: int, total: int) -> float:
    """How likely so few damaged requests (``damaged_outside`` or fewer) would fall outside a
    condition that ``outside`` of ``total`` requests lack, were the ``damaged`` ones scattered
    at random: the hypergeometric tail of Fisher's exact test, one-sided."""
    return float(stats.hypergeom.cdf(damaged_outside, total, damaged, outside))


def holm(p_values: Sequence[float], weights: Sequence[float] | None = None) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1); with ``weights``,
    the weighted Holm procedure: tests taken in order of p / w, each adjusted by the weight
    still in play over its own (equal weights: Holm's)."""
    w = list(weights) if weights is not None else [1.0] * len(p_values)
    order = sorted(range(len(p_values)), key=lambda i: p_values[i] / w[i])
    adjusted = [1.0] * len(p_values)
    remaining, running = math.fsum(w), 0.0
    for i in order:
        running = max(running, min(1.0, p_values[i] * remaining / w[i]))
        adjusted[i] = running
        remaining -= w[i]
    return adjusted


def per_test_share(family: int, pooled: bool, scheduled: float = 0.0) -> float:
    """The share of alpha one bulk test other than the engine-wide one holds at Holm's first
    step (the Bonferroni bound of its power), in a family of ``family`` bulk tests; ``pooled``:
    the design makes the engine-wide test, which holds ENGINE_SHARE of the bulk tests' share;
    ``scheduled``: the share the scheduled cells' tests hold (``joint_holm``)."""
    bulk = 1.0 - scheduled
    if not pooled or family < 2:
        return bulk / max(family, 1)
    return bulk * (1.0 - ENGINE_SHARE) / (family - 1)


def family_weights(made: int, family: int, engine: int | None, pooled: bool) -> list[float]:
    """Each test's weight in a family of ``family`` tests: the ``made`` ones, then clean ones
    (p = 1) for the tests the design makes that these scores do not. ``engine``: the index of
    the engine-wide test among the made ones; ``pooled``: the design makes one, so where these
    scores do not (a shard, an engine error), a clean test keeps its weight and a part of the
    run is never corrected more liberally than the whole."""
    slot = engine if engine is not None else made if pooled and family > made else None
    if slot is None or family < 2:
        return [1.0] * family
    others = per_test_share(family, True) * family
    return [ENGINE_SHARE * family if i == slot else others for i in range(family)]


def joint_holm(
    bulk: Sequence[float], weights: Sequence[float], scheduled: Sequence[float], share: float
) -> tuple[list[float], list[float]]:
    """One weighted Holm family over a run's bulk tests (p-values ``bulk``, relative weights
    ``weights``: ``family_weights``) and its scheduled cells' tests (``scheduled``): the bulk
    tests hold 1 - ``share`` of alpha, the scheduled ones ``share`` in equal parts. A part the
    design makes but these tests do not (no scheduled test made, no bulk test) holds its share
    as a clean test (p = 1), so no part is ever corrected more liberally than the whole. Gives
    the adjusted p-values of the bulk tests and of the scheduled ones."""
    if not 0.0 <= share < 1.0 or (scheduled and share == 0.0):
        raise ValueError(f"scheduled tests need a share of alpha in (0, 1), not {share}")
    if share == 0.0:
        return holm(bulk, weights), []
    p_bulk, w_bulk = (list(bulk), list(weights)) if bulk else ([1.0], [1.0])
    p_run = list(scheduled) or [1.0]
    total = math.fsum(w_bulk)
    w = [x * (1.0 - share) / total for x in w_bulk] + [share / len(p_run)] * len(p_run)
    adjusted = holm(p_bulk + p_run, w)
    return adjusted[: len(bulk)], adjusted[len(p_bulk) : len(p_bulk) + len(scheduled)]


def mean_ci(xs: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Two-sided t confidence interval of the mean, clipped to [0, 1] like ROUGE-L itself."""
    n = len(xs)
    centre = mean(xs)
    if n < 2:
        return centre, centre
    sd = math.sqrt(math.fsum((x - centre) ** 2 for x in xs) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return max(0.0, centre - half), min(1.0, centre + half)


def standard_error(xs: Sequence[float]) -> float | None:
    """The standard error of the mean (None for fewer than two)."""
    n = len(xs)
    if n < 2:
        return None
    centre = math.fsum(xs) / n
    return math.sqrt(math.fsum((x - centre) ** 2 for x in xs) / (n - 1) / n)


def paired_test(drops: Sequence[float], tolerance: float) -> DropTest:
    """The one-sided paired test of H0: mean(drops) <= tolerance, before Holm."""
    return DropTest(
        drop=mean(drops), p_value=one_sided_paired_p(drops, tolerance), n=len(drops), se=standard_error(drops)
    )


def paired_design(paired: int, seated: int) -> bool:
    """Whether a position's prompts also sat at the other positions of the cell (a full
    rotation: the comparison is paired by prompt), rather than a few of them (the sparse
    rotation, whose last batch wraps around when the batch size does not divide the prompts
    and seats a few prompts twice: a paired test over those few would be a test of two or
    three prompts, and the position is compared with the others' prompts instead)."""
    return paired >= 2 and 2 * paired >= seated


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
    here_values = finite(row)
    if paired_design(len(drops), len(here_values)):
        return paired_test(drops, tolerance)
    # --rotation sparse: each prompt at one position, so compare prompts here with the others
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
    at_p = finite(here_row)
    if paired_design(len(excess), len(at_p)):
        return DropTest(drop=mean(excess), n=len(excess), p_value=exchangeable_tail(here, shares))
    # --rotation sparse: each prompt at one position, so compare prompts here with the others
    elsewhere = [x for q in others for x in finite(rows[q])]
    drop = mean(at_p) - mean(elsewhere) if at_p and elsewhere else 0.0
    if len(at_p) < 2 or len(elsewhere) < 2:
        return DropTest(drop=drop, p_value=1.0, n=len(at_p))
    changed, total = sum(x > 0 for x in at_p), sum(x > 0 for x in at_p + elsewhere)
    p_value = float(stats.hypergeom.sf(changed - 1, len(at_p) + len(elsewhere), total, len(at_p)))
    return DropTest(drop=drop, p_value=min(1.0, p_value), n=len(at_p))


def min_detectable_drop(
    n: int, sd: float, *, tolerance: float, alpha: float, share: float, power: float = 0.8
) -> float:
    """Smallest true mean drop a position test detects with the given power, Bonferroni-bound
    (Holm is at least as powerful), for a paired-difference standard deviation ``sd``, when
    the test holds ``share`` of alpha (``per_test_share``)."""
    return tolerance + _t_sum(n, alpha * share, power) * sd / math.sqrt(n)


@lru_cache(maxsize=1024)
def _t_sum(n: int, level: float, power: float) -> float:
    return float(stats.t.ppf(1 - level, n - 1)) + float(stats.t.ppf(power, n - 1))
