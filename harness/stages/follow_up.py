"""Stage 3b, follow-up: after a sparse screen is generated and scored, more rotation at the
cells where it saw something (``harness.verdict.follow_up``), generated through the cache,
logged to generations.jsonl and scored as the screen was; each followed cell's scores carry
them (``CellScores.follow_up``) into the decision. Under MPI the ranks would have to agree on
the cells, which they cannot without exchanging scores, so a run of more than one rank keeps
the fixed sparse design and says so."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from harness.model.analysis import FollowUp
from harness.model.cell import Cell
from harness.model.report import Timing
from harness.model.scores import CellScores, Levels
from harness.model.vocab import Rotation
from harness.plan import Plan
from harness.progress import ProgressFactory
from harness.stages.generate import BatchFailed, failure_text, run_cell
from harness.stages.run import Baseline, Generated, Prepared, Scored
from harness.stages.score import score_cell
from harness.storage.generations import GenerationsLog
from harness.verdict.analysis import screened
from harness.verdict.follow_up import choose


def follows_up(prep: Prepared) -> bool:
    """Whether this run's design follows its sparse screen up (one process only)."""
    c = prep.config
    return c.rotation == Rotation.SPARSE and c.design.follow_up > 0 and prep.ranks.world_size == 1


def chosen(
    scores: Mapping[Cell, CellScores],
    levels: Mapping[int, Levels],
    plan: Plan,
    share: float,
    tolerance: float,
) -> FollowUp:
    """The cells a screen's scores send to the follow-up, within ``share`` of its sequences
    (the run's and calibrate's one rule)."""
    rows = screened(scores, levels, tolerance)
    return choose(rows, plan.follow_up_cost, share, plan.follow_up_budget(share), tolerance)


def follow_up(
    prep: Prepared,
    generated: Generated,
    bases: Mapping[int, Baseline],
    scored: Scored,
    progress: ProgressFactory | None = None,
    timing: Timing | None = None,
    log: GenerationsLog | None = None,
) -> tuple[Generated, Scored, FollowUp | None]:
    """The follow-up of a sparse screen (None where the design has none): the followed cells'
    outputs generated and scored; a cell whose follow-up the engine fails on fails as an
    engine error, as any batch of it would."""
    if not follows_up(prep):
        return generated, scored, None
    config = prep.config
    followed = chosen(scored.cells, scored.levels, prep.plan, config.design.follow_up, config.tolerance)
    tick = progress(followed.spent) if progress and followed.spent else (lambda k: None)
    references = tuple(d.summary for d in prep.dataset.documents)
    cells, errors = dict(scored.cells), dict(generated.errors)
    by_id = {c.id: c for c in cells}
    for cid, rounds in followed.rounds.items():
        cell = by_id[cid]
        try:
            out = run_cell(prep, cell, tick, timing, batches=prep.plan.follow_up(cell, rounds))
        except BatchFailed as failed:
            errors[cell], _ = failure_text(cell, failed, None)
            del cells[cell]
            continue
        if log is not None:
            out = dataclasses.replace(out, texts=log.add(cell.id, out.texts))
        bs1 = generated.outputs[Cell(1, cell.beam_width)].scored(0)
        again, spent = score_cell(out, bases[cell.beam_width].texts, references, bs1)
        if timing is not None:
            timing.scoring_s += spent
        cells[cell] = dataclasses.replace(cells[cell], follow_up=again)
    return (
        dataclasses.replace(generated, errors=errors),
        dataclasses.replace(scored, cells=cells),
        followed,
    )
