"""One calibration trial: a model's scores drawn for a random set of prompts (a round per
position and prompt; in the sparse rotation and the sweep, each prompt seated at one position
per cell by the run's own plan), then the run's decision over them
(``harness.verdict.decide``), held against what is true of the model."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from harness.model.analysis import FollowUp
from harness.model.cell import Cell
from harness.model.scores import CellScores, Levels
from harness.model.vocab import FindingKind, Rotation, Verdict
from harness.plan import Plan
from harness.stages.follow_up import chosen
from harness.tools.calibrate.generation import BatchSizeOne, Observations
from harness.tools.calibrate.models import Model, Target
from harness.tools.calibrate.settings import Settings
from harness.verdict.decide import Decision, decide
from harness.verdict.evidence import Shortfall
from harness.verdict.schedules import Flights
from harness.verdict.sequential import look_alpha, rotated, stage, start, undecided
from harness.verdict.statistics import SCHEDULE_SHARE


def model_key(name: str) -> int:
    """A stable number per model, so ``--only`` does not change a model's trials."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def _pick(arr: np.ndarray, rounds: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    picked: np.ndarray = arr[rounds, rows, cols]
    return picked


@dataclass(frozen=True)
class _Source:
    """Where one cell's outputs are drawn from in one trial: the model's observations (or its
    twin's), the trial's prompts and, for partial damage, which are hit at which position."""

    cell: Cell
    own: Observations
    twin: Observations
    subset: np.ndarray
    hits: np.ndarray | None
    position: int


def _draw(src: _Source, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """One cell's agreement, quality and changed flags for every position and prompt of the
    trial, each from a random round (partial hits mixed in from the undamaged twin), and the
    rounds drawn."""
    cell, own = src.cell, src.own
    rounds = rng.integers(own.agreement[cell].shape[0], size=(cell.batch_size, len(src.subset)))
    cols = np.broadcast_to(src.subset, rounds.shape)
    rows = np.arange(cell.batch_size)[:, None]
    picked = [_pick(getattr(own, k)[cell], rounds, rows, cols) for k in ("agreement", "quality", "differs")]
    if src.hits is not None:
        keep = np.zeros(rounds.shape, dtype=bool)
        keep[src.position] = src.hits
        twin_rounds = rng.integers(src.twin.agreement[cell].shape[0], size=rounds.shape)
        picked = [
            np.where(keep, p, _pick(getattr(src.twin, k)[cell], twin_rounds, rows, cols))
            for p, k in zip(picked, ("agreement", "quality", "differs"))
        ]
    return picked, rounds


def _scores(picked: list[np.ndarray], seated: Iterable[tuple[int, int]] | None) -> CellScores:
    """CellScores of the drawn arrays, kept only where ``seated`` seats (None: everywhere)."""
    if seated is not None:
        mask = np.zeros(picked[0].shape, dtype=bool)
        for position, doc in seated:
            mask[position, doc] = True
        picked = [np.where(mask, p, np.nan) for p in picked]
    rows = [tuple(tuple(map(float, r)) for r in p) for p in picked]
    return CellScores(baseline=rows[0], reference=rows[1], differs=rows[2])


@dataclass(frozen=True)
class _Drawn:
    """One cell of one trial: where its outputs are drawn from, its ring and its screen's scores."""

    source: _Source
    plan: Plan | None  # the run's sparse plan over the trial's prompts (None: full rotation)
    scores: CellScores
    shorter: Shortfall
    picked: list[np.ndarray]  # agreement, quality, changed for every position and prompt


def _trial_cell(src: _Source, rng: np.random.Generator, sparse: bool) -> _Drawn:
    """One cell in one trial: a round per position and prompt and (sparse) each prompt kept
    where the run's sparse plan seats it."""
    cell = src.cell
    picked, rounds = _draw(src, rng)
    plan = None
    if sparse and cell.batch_size > 1:  # the run's sparse plan over the trial's prompts
        ring = tuple(int(i) for i in rng.permutation(len(src.subset)))
        plan = Plan(cells=(cell,), reference_cells=(), order=ring, seed=0, rotation=Rotation.SPARSE)
    scores = _scores(picked, plan.seats(cell) if plan else None)
    shorter = src.own.shorter[cell][
        rounds, np.arange(cell.batch_size)[:, None], np.broadcast_to(src.subset, rounds.shape)
    ]
    return _Drawn(src, plan, scores, tuple(tuple(int(x) for x in row) for row in shorter), picked)


def _decide(
    model: Model,
    scores: dict[Cell, CellScores],
    levels: dict[int, Levels],
    shorter: dict[Cell, Shortfall],
    s: Settings,
    alpha: float,
    *,
    follows_up: bool = False,
    partial: frozenset[Cell] = frozenset(),
) -> Decision:
    """The run's decision over a trial's cells (the model's and its extras, in that order), with
    the design of the run the model stands for, at ``alpha``: a default run, whose scheduled
    cells hold their share of the family (clean here: in-flight models are judged by
    ``harness.tools.calibrate.inflight``, and their faults are what bulk cells cannot see)."""
    return decide(
        model.cells + model.extra,
        scores,
        levels,
        shorter,
        model.limits,
        design=model.design(),
        tolerance=s.tolerance,
        alpha=alpha,
        follows_up=follows_up,
        partial=partial,
        flights=Flights(share=SCHEDULE_SHARE),
    )


class _Ring:
    """A full-rotation trial generated stage by stage: each cell's rotation batches over one
    ring of the trial's prompts, the seats so far, batch size 1 for the prompts seated, and the
    sequences sent."""

    def __init__(self, drawn: dict[Cell, _Drawn], rng: np.random.Generator, n: int) -> None:
        ring = tuple(int(i) for i in rng.permutation(n))
        self.drawn = drawn
        self.batches = {c: Plan(cells=(c,), reference_cells=(), order=ring, seed=0).batches(c) for c in drawn}
        self.seats: dict[Cell, list[tuple[int, int]]] = {c: [] for c in drawn}
        self.answered: dict[int, set[int]] = {}  # batch size 1's prompts so far, per beam width
        self.scores: dict[Cell, CellScores] = {}
        self.sent = 0

    def seat(self, cell: Cell, which: Sequence[int]) -> None:
        """Generate ``cell``'s rotation batches ``which``."""
        part = [self.batches[cell][i] for i in which]
        self.seats[cell] += [(p, d) for b in part for p, d in enumerate(b.documents)]
        self.answered.setdefault(cell.beam_width, set()).update(d for b in part for d in b.documents)
        self.sent += len(part) * cell.batch_size
        self.scores[cell] = _scores(self.drawn[cell].picked, self.seats[cell])

    @property
    def spent(self) -> int:
        """Sequences sent: the batched cells' and batch size 1's."""
        return self.sent + sum(len(d) for d in self.answered.values())


def _looked(
    model: Model,
    drawn: dict[Cell, _Drawn],
    levels: dict[int, Levels],
    shorter: dict[Cell, Shortfall],
    rng: np.random.Generator,
    subset: np.ndarray,
    s: Settings,
) -> tuple[dict[Cell, CellScores], int, frozenset[Cell]]:
    """The run's sequential design over a full-rotation trial (``harness.stages.sequential``):
    every cell's rotation batches over one ring of the trial's prompts, in ``s.looks`` stages,
    decided at each look at its share of alpha, a cell stopping once settled, batch size 1 run
    for the prompts each look seats; the scores at each cell's last look, the sequences sent and
    the cells stopped before the last look."""
    k_all, n = s.looks, len(subset)
    ring = _Ring(drawn, rng, n)
    going, early = set(drawn), set()
    for k in range(1, k_all + 1):
        for cell in going:
            ring.seat(cell, stage(cell, len(ring.batches[cell]), k, k_all))
        if k == k_all:
            break
        decision = _decide(model, ring.scores, levels, shorter, s, look_alpha(s.alpha, k, k_all))
        still = undecided(decision, n, tolerance=s.tolerance, alpha=s.alpha, looks=k_all)
        early |= {c for c in going if c.id not in still}
        going = {c for c in going if c.id in still}
        if not going:
            break
    return ring.scores, ring.spent, frozenset(early)


def _horizon(
    drawn: dict[Cell, _Drawn], rng: np.random.Generator, n: int, horizon: float
) -> tuple[dict[Cell, CellScores], int]:
    """Every cell's scores over the first ``horizon`` of its rotation batches (the stretch the
    sequential design's first looks generate, ``harness.verdict.sequential.stage``), and the
    sequences that costs: what a look at ``horizon`` has to decide on."""
    ring = _Ring(drawn, rng, n)
    for cell, batches in ring.batches.items():
        count = len(batches)
        ring.seat(cell, rotated(range(math.ceil(horizon * count)), count, start(cell, count)))
    return ring.scores, ring.spent


def _followed(
    drawn: dict[Cell, _Drawn],
    twin: Observations,
    levels: dict[int, Levels],
    rng: np.random.Generator,
    subset: np.ndarray,
    s: Settings,
) -> tuple[dict[Cell, CellScores], FollowUp]:
    """The run's follow-up of a sparse trial (``harness.stages.follow_up.chosen``): each
    followed cell's follow-up batches drawn afresh, its scores riding on the screen's."""
    widths = sorted({c.beam_width for c in drawn})
    design = Plan(
        cells=tuple(drawn),
        reference_cells=tuple(Cell(1, w) for w in widths),
        order=tuple(range(len(subset))),
        seed=0,
        rotation=Rotation.SPARSE,
    )
    screen = {c: d.scores for c, d in drawn.items()}
    spent = chosen(screen, levels, design, s.follow_up, s.tolerance)
    out = dict(screen)
    for cell in (c for c in drawn if c.id in spent.rounds):
        d = drawn[cell]
        assert d.plan is not None
        picked, _ = _draw(d.source, rng)
        seats = (
            (p, doc)
            for batch in d.plan.follow_up(cell, spent.rounds[cell.id])
            for p, doc in enumerate(batch.documents)
        )
        out[cell] = replace(d.scores, follow_up=_scores(picked, seats))
    return out, spent


@dataclass(frozen=True)
class TrialResult:
    """What one trial found against what is true of the model."""

    flagged: bool  # the model's cells fail
    exact: bool  # every cell's degraded positions are exactly the damaged ones
    named: bool  # a finding names the model's signature
    wrong: bool  # a finding names another cause
    boundary: bool  # every beam width's first failing batch size is the true one
    spent: int = 0  # sequences the design sent (screen and follow-up; the looks that ran)
    fixed: int = 0  # sequences the fixed design sends


def trial(
    model: Model,
    obs: Observations,
    twin: Observations,
    levels: dict[int, BatchSizeOne],
    rng: np.random.Generator,
    s: Settings,
) -> TrialResult:
    """One trial of a model: its cells' scores through the run's decision."""
    subset = np.sort(rng.choice(s.pool, size=s.prompts, replace=False))
    hits = rng.random(s.prompts) < s.fraction if model.target == Target.PARTIAL else None
    sparse = s.rotation == Rotation.SPARSE or model.sweep
    drawn = {
        cell: _trial_cell(
            _Source(
                cell,
                obs if cell in model.cells else twin,
                twin,
                subset,
                hits if cell in model.cells else None,
                s.position,
            ),
            rng,
            sparse,
        )
        for cell in model.cells + model.extra
    }
    shorter = {c: d.shorter for c, d in drawn.items()}
    level = {
        w: Levels(
            agreement=tuple(float(x) for x in lv.agreement[subset]),
            quality=tuple(float(x) for x in lv.quality[subset]),
        )
        for w, lv in levels.items()
    }
    follows = sparse and s.follow_up > 0
    scores = {c: d.scores for c, d in drawn.items()}
    widths = {c.beam_width for c in drawn}  # batch size 1 of each: every prompt in the fixed design
    fixed = sum(
        len(d.plan.batches(c)) * c.batch_size if d.plan else len(subset) * c.batch_size
        for c, d in drawn.items()
    ) + len(subset) * len(widths)
    spent, alpha, early = fixed, s.alpha, frozenset[Cell]()
    if follows:
        scores, plan = _followed(drawn, twin, level, rng, subset, s)
        spent += plan.spent
    elif not sparse and s.looks > 1:
        scores, spent, early = _looked(model, drawn, level, shorter, rng, subset, s)
        alpha = look_alpha(s.alpha, s.looks, s.looks)
    elif not sparse and s.horizon < 1.0:
        scores, spent = _horizon(drawn, rng, len(subset), s.horizon)
        early = frozenset(drawn)  # each cell holds a part of its rotation, as one stopped early
    decision = _decide(model, scores, level, shorter, s, alpha, follows_up=follows, partial=early)
    cells = decision.cells
    flagged = decision.verdict == Verdict.FAIL
    exact = all(
        set(c.degraded_positions) == set(model.damaged.get(c.cell, frozenset()))
        and (c.verdict == Verdict.FAIL) == bool(model.damaged.get(c.cell))
        for c in cells
    )
    engine = decision.engine_wide
    spread = engine is not None and engine.failed  # the engine-wide test names damage spread
    named = model.pattern is not None and (
        any(c.pattern == model.pattern for c in cells) or (spread and model.pattern == FindingKind.SPREAD)
    )
    # spread names no cause: it says what was seen (damage over many positions, none alone)
    wrong = any(c.pattern is not None and c.pattern not in (model.pattern, FindingKind.SPREAD) for c in cells)
    widths = {c.beam_width for c in model.cells}
    boundary = all(
        b.first_failing == model.boundary(b.beam_width) for b in decision.boundaries if b.beam_width in widths
    )
    return TrialResult(flagged, exact, named, wrong, boundary, spent, fixed)
