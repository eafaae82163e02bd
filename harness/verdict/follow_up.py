"""The sparse rotation's follow-up: screen cheaply, then look closer where the screen saw something.

``--rotation sparse`` (what ``--sweep`` runs) seats each prompt at one position per cell, so a
position of a large batch sees N / B prompts: a fault that damages every output at one
position of one batch size can leave too few of them to clear a Holm threshold over the whole
family. The run therefore goes in two steps:

1. **Screen**: the sparse plan, tested as before, with ``1 - CONFIRM_SHARE`` of alpha.
2. **Follow-up**: a position is *suspicious* when one of its tests, before any correction, has
   ``p < SCREEN_P`` with a drop beyond the tolerance (the changed-outputs test: more changed
   outputs than at the other positions). The cells with suspicious positions, most suspicious
   first, get ``ROUNDS`` more rounds of their rotation (``Plan.follow_up``: every position sees
   prompts that never sat there), while the sequences spent stay within ``--follow-up`` (a
   share of the screen's). At each suspicious position of a followed cell the three tests
   run again over the follow-up's outputs alone, in a Holm family of their own at
   ``CONFIRM_SHARE`` of alpha; a flag there degrades the position as the screen's would.

The follow-up's outputs are new generations of prompts that never sat at the position, so its
tests are independent of the screen that chose them; with the screen at ``1 - CONFIRM_SHARE``
of alpha and the follow-up at ``CONFIRM_SHARE``, the chance of any false alarm over both stays
under alpha (a union bound). docs/method.md gives the design and calibrate's figures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from harness.model.analysis import DropTest, FollowUp, PositionStats
from harness.model.cell import Cell

SCREEN_P = 0.05  # a test below this (uncorrected) makes its position suspicious
CONFIRM_SHARE = 0.2  # the share of alpha the follow-up's family holds; the screen keeps the rest
ROUNDS = 3  # rotation rounds a followed cell gets (at most B - 1); calibrate: 2 found 84.5% of slot-cut+drift, 3 100%


def screen_alpha(alpha: float, follows_up: bool) -> float:
    """The alpha the screen's family is corrected at: all of it unless the design follows up."""
    return alpha * (1.0 - CONFIRM_SHARE) if follows_up else alpha


def _low(test: DropTest | None, beyond: float) -> float:
    return test.p_value if test is not None and test.drop > beyond else 1.0


def suspicion(s: PositionStats, tolerance: float) -> float:
    """The smallest uncorrected p of a position's tests that point at damage (1.0: none)."""
    return min(_low(s.position_test, tolerance), _low(s.quality_test, tolerance), _low(s.change_test, 0.0))


def suspicious(row: Sequence[PositionStats], tolerance: float) -> tuple[int, ...]:
    """The positions of a cell the screen saw something at."""
    return tuple(s.position for s in row if suspicion(s, tolerance) < SCREEN_P)


def choose(
    rows: Mapping[Cell, Sequence[PositionStats]],
    cost: Callable[[Cell, int], int],
    share: float,
    budget: int,
    tolerance: float,
    rounds: int = ROUNDS,
) -> FollowUp:
    """The cells to follow up, from each cell's screened positions (before Holm): the cells
    with suspicious positions in order of their most suspicious one (``suspicion``, ties in
    plan order), each taken while its follow-up (``cost``: the sequences a cell's follow-up of
    so many rounds sends, ``Plan.follow_up_cost``) still fits in ``budget`` sequences."""
    ranked = sorted(
        (min(suspicion(s, tolerance) for s in row), i, cell)
        for i, (cell, row) in enumerate(rows.items())
        if cell.batch_size > 1 and row
    )
    taken: dict[str, int] = {}
    left: list[str] = []
    spent = 0
    for p, _, cell in ranked:
        if p >= SCREEN_P:
            break
        n = min(rounds, cell.batch_size - 1)
        extra = cost(cell, n)
        if spent + extra > budget:
            left.append(cell.id)
            continue
        taken[cell.id], spent = n, spent + extra
    return FollowUp(share, budget, spent, taken, tuple(left), CONFIRM_SHARE)
