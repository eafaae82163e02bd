"""Stage 3, score: ROUGE-L of every output against its baseline (goldens, else batch size 1 of
the run) and against the reference summary.

With overlap, ``EarlyScorer`` scores each cell in one worker thread as soon as its outputs and
its baseline exist, while the engine generates the next cells; ``score_all`` takes a result
only when it was computed from the very baseline texts it would use itself, and scores
anything else on the spot, so the scores equal scoring afterwards.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from harness.model.cell import Cell
from harness.model.report import Timing
from harness.model.scores import CellScores, Levels
from harness.stages.run import Baseline, CellOutputs, Generated, Prepared, Scored
from harness.storage.generations import Row
from harness.storage.goldens import GoldenSet
from harness.verdict.scoring import rouge_l, scorable

Level = tuple[Levels, float]  # batch size 1's per-prompt levels, CPU seconds spent


def baselines(prep: Prepared, goldens: dict[int, GoldenSet], generated: Generated) -> dict[int, Baseline]:
    """Per beam width: the goldens when there are some, else batch size 1 of this run.
    Goldens are scored as outputs are, cut to the ScoringCap (--golden-engine's are recorded
    whole, and goldens on disk are outside input)."""
    out: dict[int, Baseline] = {}
    cap = prep.cap
    for w in prep.config.beam_widths:
        if w in goldens:
            path = str(prep.store.path_for(prep.engine.info.identity, prep.dataset.info.name, w))
            out[w] = Baseline(
                w,
                f"goldens {path}",
                tuple(cap.cut(goldens[w].outputs[d.id]) for d in prep.dataset.documents),
                goldens_path=path,
            )
        elif Cell(1, w) in generated.outputs:
            texts = generated.outputs[Cell(1, w)].scored(0)
            out[w] = Baseline(w, "batch size 1 of this run", tuple(t or "" for t in texts))
    return out


def visited_rouge(targets: Sequence[str | None], row: Row) -> tuple[float, ...]:
    """ROUGE-L per prompt; NaN where the prompt never sat at this position or has no target
    (a dataset without reference summaries)."""
    pairs = [
        (i, target, text)
        for i, (target, text) in enumerate(zip(targets, row))
        if target is not None and text is not None
    ]
    got = rouge_l([target for _, target, _ in pairs], [text for _, _, text in pairs])
    seen = [i for i, _, _ in pairs]
    out = [math.nan] * len(row)
    for i, value in zip(seen, got):
        out[i] = value
    return tuple(out)


def level(base: Sequence[str], references: Sequence[str | None], bs1: Row) -> Level:
    """Batch size 1's per-prompt agreement with the baseline and quality against the
    references, and the CPU seconds it took."""
    start = time.thread_time()
    unrelated = tuple(references[1:]) + tuple(references[:1])  # the next document's reference
    got = Levels(
        agreement=visited_rouge(base, bs1),
        quality=visited_rouge(references, bs1),
        unrelated=visited_rouge(unrelated, bs1) if len(references) > 1 else (),
    )
    return got, time.thread_time() - start


def _differs(row: Row, bs1: Row) -> tuple[float, ...]:
    """1.0 where the output is not batch size 1's text, 0.0 where it is, NaN: never sat here."""
    return tuple(math.nan if t is None else float(t != b) for t, b in zip(row, bs1))


def _empty(row: Row) -> tuple[float, ...]:
    """1.0 where the output has no text ROUGE-L can score (empty, blank, only punctuation or
    symbols; an engine's non-text output is stored as ""), 0.0 where it has, NaN: the prompt
    never sat here."""
    return tuple(math.nan if t is None else float(not scorable(t)) for t in row)


def score_cell(
    outputs: CellOutputs, base: Sequence[str], references: Sequence[str | None], bs1: Row
) -> tuple[CellScores, float]:
    """One cell's ROUGE-L against baseline and references, which outputs differ from batch
    size 1's, which have no text, and the CPU seconds it took."""
    start = time.thread_time()
    rows = outputs.scored_rows()
    scores = CellScores(
        baseline=tuple(visited_rouge(base, t) for t in rows),
        reference=tuple(visited_rouge(references, t) for t in rows),
        differs=tuple(_differs(t, bs1) for t in rows),
        empty=tuple(_empty(t) for t in rows),
    )
    return scores, time.thread_time() - start


class EarlyScorer:
    """Scores each cell in one worker thread as soon as its outputs and its baseline exist.

    Baselines are goldens (known from the start) or batch size 1 of this run, whose cells
    ``Plan.all_cells`` puts first.
    """

    def __init__(self, prep: Prepared) -> None:
        docs = prep.dataset.documents
        self.references = tuple(d.summary for d in docs)
        self.bases = {w: tuple(g.outputs[d.id] for d in docs) for w, g in prep.goldens.items()}
        self.under_test = set(prep.plan.cells)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-scoring")
        self.cells: dict[Cell, tuple[tuple[str, ...], Future[tuple[CellScores, float]]]] = {}
        self.levels: dict[int, tuple[tuple[str, ...], Future[Level]]] = {}
        self.bs1: dict[int, Row] = {}
        self.waiting: list[tuple[Cell, CellOutputs]] = []

    def add(self, cell: Cell, outputs: CellOutputs) -> None:
        w = cell.beam_width
        if cell == Cell(1, w):
            self.bs1[w] = outputs.scored(0)
            base = self.bases.setdefault(w, tuple(t or "" for t in self.bs1[w]))
            self.levels[w] = (base, self.pool.submit(level, base, self.references, self.bs1[w]))
        if cell in self.under_test:
            self.waiting.append((cell, outputs))
        still = []
        for c, out in self.waiting:
            against, bs1 = self.bases.get(c.beam_width), self.bs1.get(c.beam_width)
            if against is None or bs1 is None:
                still.append((c, out))
            else:
                self.cells[c] = (against, self.pool.submit(score_cell, out, against, self.references, bs1))
        self.waiting = still

    def level(self, w: int, base: tuple[str, ...]) -> Level | None:
        got = self.levels.get(w)
        return got[1].result() if got and got[0] == base else None

    def cell(self, cell: Cell, base: tuple[str, ...]) -> tuple[CellScores, float] | None:
        got = self.cells.get(cell)
        return got[1].result() if got and got[0] == base else None

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def no_baseline(cell: Cell, errors: Mapping[Cell, str]) -> str:
    """Why a cell could not be scored: its beam width has no batch-size-1 level."""
    return (
        f"no batch-size-1 baseline for beam width {cell.beam_width}: "
        f"{errors.get(Cell(1, cell.beam_width), 'batch size 1 produced nothing')}"
    )


def score_all(
    prep: Prepared,
    bases: dict[int, Baseline],
    generated: Generated,
    early: EarlyScorer | None = None,
    timing: Timing | None = None,
) -> Scored:
    """ROUGE-L of every output against baseline and reference; the cells that could not be
    scored (no batch-size-1 level for their beam width) come back with the reason."""
    unscored: dict[Cell, str] = {}
    references = tuple(d.summary for d in prep.dataset.documents)
    spent = 0.0
    levels: dict[int, Levels] = {}
    cells: dict[Cell, CellScores] = {}
    outputs, errors = generated.outputs, generated.errors
    try:
        for w, base in bases.items():
            if Cell(1, w) in outputs:
                got = (early.level(w, base.texts) if early else None) or level(
                    base.texts, references, outputs[Cell(1, w)].scored(0)
                )
                levels[w], spent = got[0], spent + got[1]
        for cell in prep.plan.cells:
            if cell in errors:
                continue
            if cell.beam_width not in levels:
                unscored[cell] = no_baseline(cell, errors)
                continue
            against = bases[cell.beam_width].texts
            got_cell = (early.cell(cell, against) if early else None) or score_cell(
                outputs[cell], against, references, outputs[Cell(1, cell.beam_width)].scored(0)
            )
            cells[cell], spent = got_cell[0], spent + got_cell[1]
    finally:
        if early:
            early.close()
    if timing is not None:
        timing.scoring_s += spent
    return Scored(cells=cells, levels=levels, unscored=unscored)
