"""Stage 2, generate: every planned batch through the engine (or the generation cache), in
position order; an engine fault fails its cell, not the run. Ranks other than 0 under MPI
only ``follow``: the same calls, nothing kept."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.bounds import ScoringCap
from harness.config import DecodingSettings
from harness.engines import guard
from harness.engines.base import BatchError, Engine, FailureKind, Generation
from harness.engines.batching import BatchJudgement, cell_notice, judge_batch
from harness.errors import (
    RESUME,
    HarnessError,
    Interrupted,
    describe,
    exit_status,
    interrupted_by,
)
from harness.model.cell import Cell
from harness.model.limits import LimitCheck
from harness.model.report import Timing
from harness.model.vocab import CheckStatus
from harness.plan import Batch, Plan
from harness.progress import Progress, ProgressFactory
from harness.stages.run import CellOutputs, FollowerRun, Generated, Prepared
from harness.storage.cache import GenerationCache
from harness.storage.generations import BeamRow, CellTexts, GenerationsLog, Row


def output_text(text: str) -> str:
    """The text to score, lone surrogates (undecodable bytes) replaced, so that odd output is
    scored (low) and stored, never a crash."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _call(
    engine: Engine,
    prompts: list[str],
    settings: DecodingSettings,
    timing: Timing | None,
    judgements: list[BatchJudgement] | None = None,
) -> tuple[list[str], list[list[str]] | None]:
    """One engine batch: the texts, and every beam of each (beam search only); where the
    engine timed its requests (servers), how they were served goes to ``judgements``."""
    t = time.perf_counter()
    gens = engine.generate(prompts, settings)
    if timing is not None:
        timing.engine_generate_s += time.perf_counter() - t
        timing.engine_calls += 1
    listed = isinstance(gens, Sequence) and not isinstance(gens, str)
    if not listed or len(gens) != len(prompts):
        got = len(gens) if listed else type(gens).__name__
        raise RuntimeError(
            f"the engine returned {got} outputs for a batch of {len(prompts)}; "
            "generate returns one Generation per prompt"
        )
    if not all(isinstance(g, Generation) for g in gens):
        wrong = next(type(g).__name__ for g in gens if not isinstance(g, Generation))
        raise RuntimeError(
            f"the engine returned a {wrong} where generate returns a Generation "
            "(harness.engines.base) per prompt"
        )
    texts = [output_text(g.text if isinstance(g.text, str) else "") for g in gens]
    timings = [g.timing for g in gens]
    if judgements is not None and any(t is not None for t in timings):
        judgements.append(judge_batch(timings, texts, settings.max_new_tokens))
    if settings.beam_width == 1:
        return texts, None
    return texts, [
        [output_text(b if isinstance(b, str) else "") for b in (g.beams or (text,))]
        for g, text in zip(gens, texts)
    ]


def generate_batch(
    engine: Engine,
    prompts: list[str],
    settings: DecodingSettings,
    cache: GenerationCache | None = None,
    timing: Timing | None = None,
    judgements: list[BatchJudgement] | None = None,
) -> tuple[list[str], list[list[str]] | None]:
    """One batch from the cache when it holds it, else from the engine (then stored)."""
    entry = cache.get_entry(settings, prompts) if cache else None
    if entry is not None:
        return entry
    texts, beams = _call(engine, prompts, settings, timing, judgements)
    if cache:
        cache.put(settings, prompts, texts, beams)
    return texts, beams


class BatchFailed(Exception):
    """A batch of a cell raised: where (batch k of n, its prompts), and the engine's exception."""

    def __init__(self, number: int, of: int, prompt_ids: Sequence[str], cause: Exception) -> None:
        super().__init__(describe(cause))
        self.where = (
            f"batch {number} of {of}, prompt{'s' if len(prompt_ids) != 1 else ''} {', '.join(prompt_ids)}"
        )
        self.cause = cause


def generate_cell(
    engine: Engine,
    cell: Cell,
    plan: Plan,
    prompts: Sequence[str],
    settings: DecodingSettings,
    tick: Progress = lambda k: None,
    cache: GenerationCache | None = None,
    timing: Timing | None = None,
    ids: Sequence[str] = (),
    batches: Sequence[Batch] | None = None,
    judgements: list[BatchJudgement] | None = None,
    numbering: tuple[int, int] | None = None,
) -> CellOutputs:
    """Every rotation batch of one cell (or the ``batches`` given: a stage's, a follow-up's);
    texts by [position][document]. A batch that raises raises ``BatchFailed`` (naming it by
    number and by its prompts' ``ids``, else indices; ``numbering``: where ``batches`` start
    among the cell's and how many it has). The notice (a server that did not run the batch
    together) is judged over ``judgements``, which a sequential run keeps over its looks."""
    n = len(plan.order)
    texts: list[list[str | None]] = [[None] * n for _ in range(cell.batch_size)]
    beams: list[list[tuple[str, ...] | None]] = [[None] * n for _ in range(cell.batch_size)]
    judgements = [] if judgements is None else judgements  # a sequential run's: over its looks
    batches = plan.batches(cell) if batches is None else batches
    for number, batch in enumerate(batches, 1):
        try:
            outs, all_beams = generate_batch(
                engine, [prompts[d] for d in batch.documents], settings, cache, timing, judgements
            )
        except HarnessError:
            raise
        except Exception as exc:
            named = [ids[d] if d < len(ids) else f"#{d}" for d in batch.documents]
            start, total = numbering or (0, len(batches))
            raise BatchFailed(start + number, total, named, exc) from exc
        for position, (doc, text) in enumerate(zip(batch.documents, outs)):
            texts[position][doc] = text
            if all_beams is not None:
                beams[position][doc] = tuple(all_beams[position])
        tick(len(batch.documents))
    rows: tuple[Row, ...] = tuple(tuple(t) for t in texts)
    kept: tuple[BeamRow, ...] = tuple(tuple(b) for b in beams) if cell.beam_width > 1 else ()
    notice = cell_notice(judgements) if cell.batch_size > 1 else None
    return CellOutputs(
        cell=cell,
        texts=CellTexts(held=rows, beams=kept),
        cap=ScoringCap.for_tokens(settings.max_new_tokens),
        notice=notice,
    )


@dataclass(frozen=True)
class _First:
    """The run's first failure that says what kind it is (a server's): later ones of the same
    kind are reported as failing the same way."""

    cell: str
    where: str
    kind: FailureKind
    text: str


def failure_text(cell: Cell, failed: BatchFailed, first: _First | None) -> tuple[str, _First | None]:
    """A failed cell's message, and the run's first failure so far. An engine error without a
    ``kind`` is its own one line, as before; a server's names its batch and prompts, and a later
    cell that failed the same way (same kind: a server that went away, no beam search, ...)
    names the first failure instead of showing only its last symptom."""
    text = describe(failed.cause)
    kind = failed.cause.kind if isinstance(failed.cause, BatchError) else None
    if kind is None:
        return text, first
    if first is None:
        first = _First(cell.id, failed.where, kind, text)
        return f"{text} (the run's first failure: {cell.id}, {failed.where})", first
    if kind != first.kind:
        return f"{text} ({failed.where})", first
    return (
        f"failed the same way as the run's first failure, {first.cell} ({first.where}): "
        f"{first.text}; this cell stopped at {failed.where}",
        first,
    )


def output_checks(
    checks: dict[Cell, tuple[LimitCheck, ...]], capped: dict[Cell, int], max_new_tokens: int
) -> dict[Cell, tuple[LimitCheck, ...]]:
    """The cells' checks plus, where outputs were cut before scoring, a warning naming how
    many (an engine that does not stop at --max-new-tokens)."""
    cap = ScoringCap.for_tokens(max_new_tokens)
    out = dict(checks)
    for cell, n in capped.items():
        note = LimitCheck(
            cell.id,
            "output_length",
            CheckStatus.WARN,
            f"{n} outputs ran past {cap.describe()} and were scored on that much; "
            f"the engine did not stop at --max-new-tokens {max_new_tokens} "
            "(generations.jsonl keeps them whole)",
        )
        out[cell] = (*out.get(cell, ()), note)
    return out


def run_cell(
    prep: Prepared,
    cell: Cell,
    tick: Progress,
    timing: Timing | None,
    batches: Sequence[Batch] | None = None,
    judgements: list[BatchJudgement] | None = None,
    numbering: tuple[int, int] | None = None,
) -> CellOutputs:
    """``generate_cell`` with the run's engine, plan, prompts, decoding, cache and ids."""
    return generate_cell(
        prep.engine,
        cell,
        prep.plan,
        prep.prompts,
        prep.config.decoding(cell.beam_width),
        tick,
        prep.cache,
        timing,
        [d.id for d in prep.dataset.documents],
        batches=batches,
        judgements=judgements,
        numbering=numbering,
    )


def over_cap(out: CellOutputs) -> int:
    """How many of a cell's outputs run past the scoring cap."""
    return sum(t is not None and out.cap.cut(t) != t for row in out.texts.rows() for t in row)


def generate_all(
    prep: Prepared,
    progress: ProgressFactory | None = None,
    timing: Timing | None = None,
    on_cell: Callable[[Cell, CellOutputs], None] | None = None,
    log: GenerationsLog | None = None,
) -> Generated:
    """Every cell's outputs, each handed to ``on_cell`` as soon as it is complete; an engine
    fault fails its cell, not the run. With ``log`` each complete cell's texts (and beams) go
    to generations.jsonl first and are read back from there, so memory does not grow with
    the run."""
    tick = progress(prep.plan.sequences()) if progress else (lambda k: None)
    outputs: dict[Cell, CellOutputs] = {}
    errors: dict[Cell, str] = {}
    capped: dict[Cell, int] = {}
    first: _First | None = None
    for cell in prep.plan.all_cells:
        try:
            out = run_cell(prep, cell, tick, timing)
        except BatchFailed as failed:
            errors[cell], first = failure_text(cell, failed, first)
            continue
        over = over_cap(out)
        if over:
            capped[cell] = over
        if log is not None:  # from now on read back from generations.jsonl, which keeps them whole
            out = dataclasses.replace(out, texts=log.add(cell.id, out.texts))
        outputs[cell] = out
        if on_cell is not None:
            on_cell(cell, out)
    return Generated(outputs=outputs, errors=errors, capped=capped)


def interrupted(prep: Prepared, log: GenerationsLog, cause: KeyboardInterrupt) -> Interrupted:
    """Ctrl-C (or SIGTERM, SIGHUP: ``cause``) while generating: what is kept (cache,
    generations.jsonl) and how to resume."""
    stats = prep.cache.stats if prep.cache else None
    cells = f"the {log.cells} cells completed so far are in {log.path}"
    head, status = interrupted_by(cause), exit_status(cause)
    if stats is None or not stats.enabled:
        why = stats.reason if stats else "off"
        return Interrupted(
            f"{head}: {cells}; the generation cache is {why}, so a rerun generates everything again", status
        )
    if prep.cache is not None and not prep.cache.writable:
        return Interrupted(
            f"{head}: {cells}; the generation cache {stats.reason}, so a rerun generates the rest again",
            status,
        )
    return Interrupted(
        f"{head}: {stats.batches_generated} batches generated this run are "
        f"kept in the generation cache {stats.folder} and {cells}; {RESUME}",
        status,
    )


def follow(prep: Prepared, progress: ProgressFactory | None = None) -> FollowerRun:
    """A rank other than 0: the same generate calls as rank 0, nothing scored or written."""
    try:
        generated = generate_all(prep, progress)
    finally:
        guard.close(prep.engine)
    return FollowerRun(
        ranks=prep.ranks,
        engine=prep.engine.info,
        batches=sum(len(prep.plan.batches(c)) for c in prep.plan.all_cells),
        sequences=prep.plan.sequences(),
        seconds=time.perf_counter() - prep.t0,
        errors={c.id: e for c, e in generated.errors.items()},
    )
