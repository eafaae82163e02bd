"""Stages 2-3 of a sequential full-rotation run (``--looks K``, harness.verdict.sequential):
generate each cell in K equal stages (batch size 1 first, for the prompts each stage seats), score
each stage's new outputs, decide over everything so far at the look's share of alpha and stop the cells whose
answer is known; each cell's outputs go to generations.jsonl once it stops. What comes out is
what the fixed design's generate and score stages give, over the batches that ran."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from harness.engines.batching import MIN_JUDGED, BatchJudgement
from harness.model.analysis import Looks
from harness.model.cell import Cell
from harness.model.report import Timing
from harness.model.scores import CellScores, Levels
from harness.model.vocab import Rotation, Served
from harness.plan import Batch, Plan
from harness.progress import ProgressFactory
from harness.stages.analyse import analyse
from harness.stages.generate import BatchFailed, _First, failure_text, over_cap, run_cell
from harness.stages.run import Baseline, CellOutputs, Generated, Prepared, Scored
from harness.stages.schedules import planned
from harness.stages.score import baselines, level, no_baseline, score_cell
from harness.storage.generations import CellTexts, GenerationsLog
from harness.verdict.sequential import BETA, INTERIM_SHARE, engine_open, look_alpha, stage, undecided


def looks(prep: Prepared) -> int:
    """The looks this run's design takes: ``--looks`` for a full rotation in one process that
    records no goldens, else 1 (the fixed design: a sparse run follows its screen up instead;
    MPI ranks could not agree on where to stop without exchanging scores; goldens need every
    output)."""
    c = prep.config
    if c.rotation != Rotation.FULL or prep.ranks.world_size != 1 or c.update_goldens:
        return 1
    return c.design.looks


@dataclasses.dataclass
class _Cell:
    """One cell's outputs so far, by position and document."""

    texts: list[list[str | None]]
    beams: list[list[tuple[str, ...] | None]]
    judgements: list[BatchJudgement] = dataclasses.field(default_factory=list)  # a server's, over the looks
    notice: str | None = None

    def add(self, out: CellOutputs) -> None:
        for p, row in enumerate(out.texts.rows()):
            for d, text in enumerate(row):
                if text is not None:
                    self.texts[p][d] = text
                    if out.texts.beams:
                        self.beams[p][d] = out.texts.beams[p][d]
        self.notice = out.notice  # judged over every batch so far

    @property
    def judged(self) -> bool:
        """Whether a server's timing has shown that it ran the batches together, over enough of
        them (an engine that does not time its requests: nothing to judge). A cell whose
        batches look served one after another so far runs on: over all its batches, as the
        fixed design judges them, a few early ones served apart are outvoted."""
        if not self.judgements:
            return True
        seen = sum(j.verdict not in (Served.UNJUDGED, Served.UNTRUSTED) for j in self.judgements)
        return seen >= MIN_JUDGED and self.notice is None

    def outputs(self, cell: Cell, cap: CellOutputs) -> CellOutputs:
        rows = tuple(tuple(r) for r in self.texts)
        kept = tuple(tuple(b) for b in self.beams) if cell.beam_width > 1 else ()
        return dataclasses.replace(cap, texts=CellTexts(held=rows, beams=kept), notice=self.notice)


def run_looks(
    prep: Prepared,
    progress: ProgressFactory | None = None,
    timing: Timing | None = None,
    log: GenerationsLog | None = None,
) -> tuple[Generated, dict[int, Baseline], Scored, Looks]:
    """Generate and score look by look until every cell is settled or the last look."""
    config, plan, k_all = prep.config, prep.plan, looks(prep)
    n = len(plan.order)
    references = tuple(d.summary for d in prep.dataset.documents)
    held = {
        c: _Cell([[None] * n for _ in range(c.batch_size)], [[None] * n for _ in range(c.batch_size)])
        for c in plan.all_cells
    }
    last: dict[Cell, CellOutputs] = {}
    errors: dict[Cell, str] = {}
    scores: dict[Cell, CellScores] = {}
    levels: dict[int, Levels] = {}
    bases: dict[int, Baseline] = {}
    going = set(plan.cells)
    decided: dict[str, int] = {}
    spent = 0
    done: dict[Cell, set[int]] = {}  # batch size 1's batches generated so far (by ring index)
    first_failure: _First | None = None
    left_open = False  # stopped before the last look with the engine-wide test open
    for k in range(1, k_all + 1):
        fresh: dict[Cell, CellOutputs] = {}
        parts = {c: _part(plan, c, k, k_all, going, errors) for c in plan.cells if c.batch_size > 1}
        for ref in plan.reference_cells:  # batch size 1 for the prompts this look seats first
            parts[ref] = (
                []  # batch size 1 failed: its cells cannot be scored, and stop as errors
                if ref in errors
                else _baseline_part(plan, ref, parts, done.setdefault(ref, set()), k == 1 and ref in going)
            )
        todo = [(cell, plan.batches(cell), parts.get(cell, [])) for cell in plan.all_cells]
        size = sum(len(part) * cell.batch_size for cell, _, part in todo)
        tick = progress(size) if progress and size else (lambda k: None)
        for cell, every, batches in todo:
            if not batches:
                continue
            try:
                out = run_cell(
                    prep,
                    cell,
                    tick,
                    timing,
                    batches=batches,
                    judgements=held[cell].judgements,
                    numbering=(every.index(batches[0]), len(every)),
                )
            except BatchFailed as failed:
                errors[cell], first_failure = failure_text(cell, failed, first_failure)
                continue
            spent += len(batches) * cell.batch_size
            held[cell].add(out)
            if cell in plan.reference_cells:
                done.setdefault(cell, set()).update(b.index for b in batches)
            fresh[cell], last[cell] = out, out
        so_far = {c: held[c].outputs(c, last[c]) for c in last}
        if any(c in plan.reference_cells for c in fresh):  # the baselines of the prompts seated so far
            bases = baselines(prep, prep.goldens, Generated(outputs=so_far, errors=dict(errors)))
            levels = {
                w: level(base.texts, references, so_far[Cell(1, w)].scored(0))[0]
                for w, base in bases.items()
                if Cell(1, w) in so_far
            }
        for cell, out in fresh.items():
            w = cell.beam_width
            if cell not in plan.cells or w not in levels:
                continue
            got = score_cell(out, bases[w].texts, references, so_far[Cell(1, w)].scored(0))[0]
            scores[cell] = scores[cell].joined(got) if cell in scores else got
        generated = Generated(outputs=so_far, errors=dict(errors))
        scored = Scored(
            cells=dict(scores), levels=dict(levels), unscored=_unscored(plan.cells, levels, errors)
        )
        if k == k_all:
            break
        # the scheduled cells run after the last look; their share of alpha is kept for them
        decision = analyse(
            prep, generated, scored, alpha=look_alpha(config.alpha, k, k_all), flights=planned(prep)
        )
        still = set(undecided(decision, n, tolerance=config.tolerance, alpha=config.alpha, looks=k_all))
        for cell in going:
            if cell.id not in still and held[cell].judged:
                decided[cell.id] = k
        going = {c for c in going if c.id in still or not held[c].judged}
        if not going:
            left_open = engine_open(decision, n, tolerance=config.tolerance, alpha=config.alpha, looks=k_all)
            break
    for cell in going:
        decided.setdefault(cell.id, k_all)
    outputs = {}
    for cell in plan.all_cells:
        if cell not in last:
            continue
        out = held[cell].outputs(cell, last[cell])
        if log is not None:
            out = dataclasses.replace(out, texts=log.add(cell.id, out.texts))
        outputs[cell] = out
    record = Looks(
        looks=k_all,
        interim_share=INTERIM_SHARE,
        beta=BETA,
        spent=spent,
        fixed=plan.sequences(),
        decided={c.id: decided.get(c.id, k_all) for c in plan.cells if c not in errors},
        engine_open=left_open,
    )
    final = Scored(cells=scores, levels=levels, unscored=_unscored(plan.cells, levels, errors))
    capped = {c: n for c, out in outputs.items() if (n := over_cap(out))}
    return Generated(outputs=outputs, errors=errors, capped=capped), bases, final, record


def _part(
    plan: Plan, cell: Cell, look: int, looks: int, going: set[Cell], errors: Mapping[Cell, str]
) -> list[Batch]:
    """The batches of a batched ``cell`` stage ``look`` generates: a running cell's share,
    nothing for a stopped or failed one."""
    if cell not in going or cell in errors:
        return []
    every = plan.batches(cell)
    return [every[i] for i in stage(cell, len(every), look, looks)]


def _baseline_part(
    plan: Plan, ref: Cell, parts: Mapping[Cell, list[Batch]], done: set[int], tested: bool
) -> list[Batch]:
    """Batch size 1's batches a look needs first: one per prompt the look's batches of the same
    beam width seat that batch size 1 has not answered yet (its batch k holds ring prompt k);
    all of them at the first look when batch size 1 is itself under test."""
    n = len(plan.order)
    every = plan.batches(ref)
    if tested:
        return [b for b in every if b.index not in done]
    seated = {
        (b.index + j) % n
        for c, part in parts.items()
        if c.beam_width == ref.beam_width
        for b in part
        for j in range(c.batch_size)
    }
    return [every[i] for i in sorted(seated - done)]


def _unscored(
    cells: tuple[Cell, ...], levels: Mapping[int, Levels], errors: Mapping[Cell, str]
) -> dict[Cell, str]:
    return {c: no_baseline(c, errors) for c in cells if c not in errors and c.beam_width not in levels}
