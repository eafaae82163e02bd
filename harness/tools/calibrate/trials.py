"""One calibration trial: a model's scores drawn for a random set of prompts (a round per
position and prompt; in the sparse rotation and the sweep, each prompt seated at one position
per cell by the run's own plan), then the run's decision over them
(``harness.verdict.decide``), held against what is true of the model."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from harness.model.cell import Cell
from harness.model.scores import CellScores, Levels
from harness.model.vocab import FindingKind, Rotation, Verdict
from harness.plan import Plan
from harness.tools.calibrate.generation import BatchSizeOne, Observations
from harness.tools.calibrate.models import Model, Target
from harness.tools.calibrate.settings import Settings
from harness.verdict.decide import decide
from harness.verdict.signatures import Shortfall


def model_key(name: str) -> int:
    """A stable number per model, so ``--only`` does not change a model's trials."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def _pick(arr: np.ndarray, rounds: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    picked: np.ndarray = arr[rounds, rows, cols]
    return picked


def _trial_cell(
    cell: Cell,
    own: Observations,
    twin: Observations,
    rng: np.random.Generator,
    subset: np.ndarray,
    hits: np.ndarray | None,
    position: int,
    sparse: bool,
) -> tuple[CellScores, Shortfall]:
    """One cell's scores and padding shortfall in one trial: a round per position and prompt,
    partial hits mixed in from the undamaged twin, and (sparse) each prompt kept where the
    run's sparse plan seats it."""
    arr = own.agreement[cell]
    prompts = len(subset)
    rounds = rng.integers(arr.shape[0], size=(cell.batch_size, prompts))
    cols = np.broadcast_to(subset, rounds.shape)
    rows = np.arange(cell.batch_size)[:, None]
    picked = [_pick(getattr(own, k)[cell], rounds, rows, cols) for k in ("agreement", "quality", "differs")]
    if hits is not None:
        keep = np.zeros(rounds.shape, dtype=bool)
        keep[position] = hits
        twin_rounds = rng.integers(twin.agreement[cell].shape[0], size=rounds.shape)
        picked = [
            np.where(keep, p, _pick(getattr(twin, k)[cell], twin_rounds, rows, cols))
            for p, k in zip(picked, ("agreement", "quality", "differs"))
        ]
    if sparse and cell.batch_size > 1:  # the run's sparse plan over the trial's prompts
        ring = tuple(int(i) for i in rng.permutation(prompts))
        plan = Plan(cells=(cell,), reference_cells=(), order=ring, seed=0, rotation=Rotation.SPARSE)
        seated = np.zeros(rounds.shape, dtype=bool)
        for position, doc in plan.seats(cell):
            seated[position, doc] = True
        picked = [np.where(seated, p, np.nan) for p in picked]
    as_rows = [tuple(tuple(map(float, r)) for r in p) for p in picked]
    scores = CellScores(baseline=as_rows[0], reference=as_rows[1], differs=as_rows[2])
    shorter = own.shorter[cell][rounds, rows, cols]
    return scores, tuple(tuple(int(x) for x in row) for row in shorter)


@dataclass(frozen=True)
class TrialResult:
    """What one trial found against what is true of the model."""

    flagged: bool  # the model's cells fail
    exact: bool  # every cell's degraded positions are exactly the damaged ones
    named: bool  # a finding names the model's signature
    wrong: bool  # a finding names another cause
    boundary: bool  # every beam width's first failing batch size is the true one


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
    scores: dict[Cell, CellScores] = {}
    shorter: dict[Cell, Shortfall] = {}
    for cell in model.cells + model.extra:
        own = obs if cell in model.cells else twin
        scores[cell], shorter[cell] = _trial_cell(
            cell,
            own,
            twin,
            rng,
            subset,
            hits if cell in model.cells else None,
            s.position,
            s.rotation == Rotation.SPARSE or model.sweep,
        )
    level = {
        w: Levels(
            agreement=tuple(float(x) for x in lv.agreement[subset]),
            quality=tuple(float(x) for x in lv.quality[subset]),
        )
        for w, lv in levels.items()
    }
    decision = decide(
        model.cells + model.extra,
        scores,
        level,
        shorter,
        model.limits,
        design=model.design(),
        tolerance=s.tolerance,
        alpha=s.alpha,
    )
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
    return TrialResult(flagged, exact, named, wrong, boundary)
