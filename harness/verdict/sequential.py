"""The sequential design of a full-rotation run: stop a cell once its answer is known.

A full rotation of N prompts is N batches per cell. ``--looks K`` (default 4) generates them in
K equal stages; after each stage every cell still running is analysed over what it has so far
(``harness.verdict.decide``, the run's one decision), and a cell stops once each of its tests is
*settled*:

- **damage shown**: the position is degraded (or the cell's omnibus test flags) with the Holm
  family corrected at this look's share of alpha; or
- **no damage the fixed design would see**: the test's upper confidence bound (one-sided, level
  ``BETA / (K - 1)`` per interim look) lies below the drop the fixed design detects with 80%
  power at that test's spread (``statistics.min_detectable_drop`` over the N prompts of the full
  rotation), and the position has seen enough prompts to have held some of the damage any
  other cell shows at the same position (``seen_enough``: outputs identical to batch size 1's
  have no spread, and a t-bound over them rules out any drop, also one on a few prompts the
  look did not hold). A changed-outputs test degrades a position only where its position and
  quality tests show a loss, so it is settled with them.

The engine-wide test pools every batched cell: while it is unsettled, and no cell fails (which
fails the run whatever the engine-wide test says), every batched cell runs.

**Error rates over the looks.** The interim looks share ``INTERIM_SHARE`` of alpha equally, the
last look has the rest: a test rejected at any look was rejected by that look's Holm family at
that look's share, so the chance of any false alarm over all looks is at most alpha (a union
bound). Stopping for no damage never rejects anything (a non-binding futility bound): a cell
stopped so cannot be rejected later either (its bound lies below the detectable drop by more
than a rejection's margin), and a position whose true drop is what the fixed design detects is
stopped as clean with probability at most ``BETA`` over the looks. The decision reported is
the run's decision over everything generated, at the last look's share of alpha.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from harness.model.analysis import DropTest, EngineWide, Looks, PositionStats
from harness.model.cell import Cell
from harness.model.report import CellResult, Method
from harness.model.vocab import Verdict
from harness.verdict.decide import Decision
from harness.verdict.evidence import net_share
from harness.verdict.follow_up import SCREEN_P, suspicion
from harness.verdict.statistics import min_detectable_drop, per_test_share

INTERIM_SHARE = 0.05  # the share of alpha the interim looks spend between them
BETA = 0.01  # the chance, over the looks, of stopping a damaged test as clean
LOOKS = 4  # --looks' default


def look_alpha(alpha: float, look: int, looks: int) -> float:
    """The alpha look ``look`` (1-based) of ``looks`` corrects its family at."""
    if looks <= 1:
        return alpha
    return alpha * INTERIM_SHARE / (looks - 1) if look < looks else alpha * (1.0 - INTERIM_SHARE)


def final_alpha(method: Method) -> float:
    """The alpha a report's decision was corrected at: its last look's share (the fixed
    design's: all of it)."""
    looks = method.sequential.looks if method.sequential is not None else 1
    return look_alpha(method.alpha, looks, looks)


def look_beta(looks: int) -> float:
    """The level of each interim look's futility bound."""
    return BETA / max(looks - 1, 1)


def start(cell: Cell, count: int) -> int:
    """Where ``cell``'s stages start in its ring of ``count`` rotation batches: a place of its
    own, fixed by its id. With one start for all, position p of every cell would see the same
    prompts at the first look, and damage on a few prompts that none of them holds would hide
    from all of them at once; from starts of their own, the cells that share a damaged
    position look at other prompts each."""
    return int.from_bytes(hashlib.sha256(cell.id.encode()).digest()[:4], "little") % max(count, 1)


def rotated(which: range, count: int, first: int) -> tuple[int, ...]:
    """The batches ``which`` of a ring of ``count``, counted from batch ``first``."""
    return tuple((first + i) % count for i in which)


def stage(cell: Cell, count: int, look: int, looks: int) -> tuple[int, ...]:
    """Which of ``cell``'s ``count`` rotation batches stage ``look`` (1-based) of ``looks``
    generates: its share of them, in ring order from the cell's ``start``."""
    share = range(math.ceil((look - 1) * count / looks), math.ceil(look * count / looks))
    return rotated(share, count, start(cell, count))


def clean(
    test: DropTest | None,
    full: int,
    tolerance: float,
    alpha: float,
    share: float,
    beta: float,
    scale: float = 1.0,
) -> bool:
    """Whether a test shows, at level ``beta``, that its drop is below what the fixed design
    (``full`` prompts, ``share`` of ``alpha``) detects with 80% power; ``scale``: the fixed
    design's spread per prompt against this look's (below 1 for a test of per-prompt means
    over outputs that the later looks add to)."""
    if test is None:
        return True
    if test.se is None or test.n < 2:
        return False
    sd = test.se * math.sqrt(test.n) * scale
    detectable = min_detectable_drop(full, sd, tolerance=tolerance, alpha=alpha, share=share)
    bound = test.drop + float(stats.t.ppf(1.0 - beta, test.n - 1)) * test.se
    return bound < detectable


def damage_shares(cells: Sequence[CellResult], tolerance: float) -> dict[int, float]:
    """Per batch position that some cell shows damage at (degraded, or suspicious: a test below
    ``follow_up.SCREEN_P`` uncorrected with a drop beyond the tolerance), the smallest share of
    prompts the damage reached there: the outputs that changed, net of the share that changes
    at that cell's other positions (benign drift); positions with no more changed outputs than
    those show nothing to count."""
    out: dict[int, float] = {}
    for c in cells:
        seen = {s.position for s in c.positions if s.degraded or suspicion(s, tolerance) < SCREEN_P}
        rest = [s.differing for s in c.positions if s.position not in seen]
        background = float(np.median(rest)) if rest else 0.0
        for s in c.positions:
            share = net_share(s.differing, background)
            if s.position in seen and share > 0:
                out[s.position] = min(out.get(s.position, 1.0), share)
    return out


def seen_enough(n: int, damage: float | None, beta: float) -> bool:
    """Whether ``n`` prompts with no damage among them rule out, at level ``beta``, damage
    that reaches a share ``damage`` of the prompts (None: none shown anywhere): a sample of
    ``n`` misses all of it with chance ``(1 - damage) ** n``. Identical outputs have no spread,
    so the t-bound alone rules out any drop; damage on a few prompts, none of which a look
    held, is what it cannot see."""
    return damage is None or (1.0 - damage) ** n <= beta


def _position_settled(
    s: PositionStats,
    full: int,
    tolerance: float,
    alpha: float,
    share: float,
    beta: float,
    damage: float | None,
) -> bool:
    if s.degraded:
        return True
    tests = all(clean(t, full, tolerance, alpha, share, beta) for t in (s.position_test, s.quality_test))
    return tests and seen_enough(s.n, damage, beta)


def cell_settled(
    cell: CellResult,
    full: int,
    *,
    tolerance: float,
    alpha: float,
    share: float,
    beta: float,
    damage: Mapping[int, float] | None = None,
) -> bool:
    """Whether a cell's answer is known: every position degraded or clean, and its omnibus
    test flagged or clean or moot (a degraded position fails the cell whatever it says); a
    cell the engine could not run is settled: it is an error. A position damaged elsewhere on
    a share of the prompts (``damage``, by position: ``damage_shares``) is clean here only once
    enough prompts were seen to have held some of it (``seen_enough``)."""
    if cell.batch_size == 1 or cell.error is not None:
        return True
    shares = damage or {}
    positions = all(
        _position_settled(s, full, tolerance, alpha, share, beta, shares.get(s.position))
        for s in cell.positions
    )
    omnibus = (
        cell.omnibus is None
        or cell.omnibus.flagged
        or bool(cell.degraded_positions)
        or clean(cell.omnibus, full, tolerance, alpha, share, beta)
    )
    return positions and omnibus


def pooled_share(cells: Sequence[CellResult], full: int) -> float:
    """The share of the fixed design's batched outputs a look has: the engine-wide test's
    per-prompt means are over that many of the outputs they will be over."""
    batched = [c for c in cells if c.batch_size > 1 and c.error is None]
    planned = sum(full * c.batch_size for c in batched)
    return sum(s.n for c in batched for s in c.positions) / planned if planned else 1.0


def engine_settled(
    engine: EngineWide | None,
    full: int,
    *,
    tolerance: float,
    alpha: float,
    share: float,
    beta: float,
    generated: float = 1.0,
) -> bool:
    """Whether the engine-wide test is flagged or clean (None: the run makes none). Its spread
    is judged as the fixed design's could be: a per-prompt mean over all of the outputs a
    prompt gets, where ``generated`` (``pooled_share``) of them are in, spreads at least
    ``sqrt(generated)`` as widely (all of the spread within prompts: the smallest the fixed
    design's could be, so a drop it detects is never taken for clean)."""
    if engine is None or engine.test.flagged:
        return True
    return clean(engine.test, full, tolerance, alpha, share, beta, scale=math.sqrt(min(generated, 1.0)))


def running(
    cells: Sequence[CellResult],
    engine: EngineWide | None,
    full: int,
    *,
    tolerance: float,
    alpha: float,
    share: float,
    beta: float,
) -> tuple[str, ...]:
    """The ids of the cells that must go on: those not settled, or, while the engine-wide test
    is not settled and no cell fails (a failing cell fails the run whatever it says), every
    batched cell."""
    settle = dict(tolerance=tolerance, alpha=alpha, share=share, beta=beta)
    failing = any(c.verdict == Verdict.FAIL for c in cells)
    if not failing and not _engine_done(cells, engine, full, settle):
        return tuple(c.id for c in cells if c.batch_size > 1 and c.error is None)
    damage = damage_shares(cells, tolerance)
    return tuple(c.id for c in cells if not cell_settled(c, full, **settle, damage=damage))


def _engine_done(
    cells: Sequence[CellResult], engine: EngineWide | None, full: int, settle: dict[str, float]
) -> bool:
    """``engine_settled`` over the batched outputs ``cells`` hold so far."""
    return engine_settled(engine, full, **settle, generated=pooled_share(cells, full))


def _look(decision: Decision, tolerance: float, alpha: float, looks: int) -> dict[str, float]:
    """What settles a test at a look: the tolerance, ``alpha``, its family's per-test share of
    it, and the futility level of ``looks`` looks."""
    share = per_test_share(decision.family, decision.engine_share is not None, decision.schedule_share or 0.0)
    return dict(tolerance=tolerance, alpha=alpha, share=share, beta=look_beta(looks))


def engine_open(decision: Decision, full: int, *, tolerance: float, alpha: float, looks: int) -> bool:
    """Whether a look's engine-wide test is neither flagged nor clean (as ``undecided`` reads it)."""
    settle = _look(decision, tolerance, alpha, looks)
    return not _engine_done(decision.cells, decision.engine_wide, full, settle)


def with_open_engine(decision: Decision, looked: Looks | None) -> Decision:
    """The decision as a run that stopped with its engine-wide test open reports it: not a
    pass, but a test the run did not finish (the figures are what it had)."""
    e = decision.engine_wide
    if looked is None or not looked.engine_open or e is None or e.failed:
        return decision
    said = (
        f"engine-wide test not settled: the run stopped once a cell failed, which fails it whatever "
        f"this test says; so far a mean drop of {e.test.drop:.3f} below batch size 1 over {e.test.n} "
        "prompts (--looks 1 runs it to its answer)"
    )
    return dataclasses.replace(decision, engine_wide=dataclasses.replace(e, message=said))


def undecided(
    decision: Decision, full: int, *, tolerance: float, alpha: float, looks: int
) -> tuple[str, ...]:
    """``running`` over a look's decision: its family's per-test share of ``alpha``, the
    futility level of ``looks`` looks (the run's stage and calibrate both call it)."""
    return running(decision.cells, decision.engine_wide, full, **_look(decision, tolerance, alpha, looks))
