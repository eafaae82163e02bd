"""Stage 2, generate: every planned batch through the engine (or the generation cache), in
position order; an engine fault fails its cell, not the run. Ranks other than 0 under MPI
only ``follow``: the same calls, nothing kept."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.bounds import ScoringCap
from harness.config import DecodingSettings
from harness.engines import guard
from harness.engines.base import Engine, RequestTiming
from harness.engines.batching import BatchJudgement, cell_notice, judge_batch
from harness.errors import RESUME, HarnessError, Interrupted, describe
from harness.limits.preflight import LimitCheck
from harness.plan import Cell, Plan
from harness.results import CellOutputs, FollowerRun, Generated, Prepared, Timing
from harness.storage.cache import GenerationCache
from harness.storage.generations import GenerationsLog, TextRows

Progress = Callable[[int], None]
ProgressFactory = Callable[[int], Progress]


def output_text(generation: Any) -> str:
    """The text to score: "" for a missing one; lone surrogates (undecodable bytes) replaced,
    so that odd output is scored (low) and stored, never a crash."""
    text = getattr(generation, "text", generation)
    if not isinstance(text, str):
        return ""
    return text.encode("utf-8", "replace").decode("utf-8")


def _call(engine: Engine, prompts: list[str], settings: DecodingSettings, timing: Timing | None,
          judgements: list[BatchJudgement] | None = None) -> tuple[list[str], list[list[str]] | None]:
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
        raise RuntimeError(f"the engine returned {got} outputs for a batch of {len(prompts)}; "
                           "generate returns one Generation per prompt")
    texts = [output_text(g) for g in gens]
    timings = [t if isinstance(t := getattr(g, "timing", None), RequestTiming) else None for g in gens]
    if judgements is not None and any(t is not None for t in timings):
        judgements.append(judge_batch(timings, texts))
    if settings.beam_width == 1:
        return texts, None
    return texts, [[output_text(b) for b in (getattr(g, "beams", None) or (text,))]
                   for g, text in zip(gens, texts)]


def generate_batch(engine: Engine, prompts: list[str], settings: DecodingSettings,
                   cache: GenerationCache | None = None, timing: Timing | None = None,
                   judgements: list[BatchJudgement] | None = None
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
        self.where = f"batch {number} of {of}, prompt{'s' if len(prompt_ids) != 1 else ''} " \
                     f"{', '.join(prompt_ids)}"
        self.cause = cause


def generate_cell(engine: Engine, cell: Cell, plan: Plan, prompts: Sequence[str],
                  settings: DecodingSettings, tick: Progress = lambda k: None,
                  cache: GenerationCache | None = None, timing: Timing | None = None,
                  ids: Sequence[str] = ()) -> CellOutputs:
    """Every rotation batch of one cell; texts by [position][document]. A batch that raises
    raises ``BatchFailed`` (naming it by number and by its prompts' ``ids``, else indices)."""
    n = len(plan.order)
    texts: list[list[str | None]] = [[None] * n for _ in range(cell.batch_size)]
    beams: list[list[tuple[str, ...] | None]] = [[None] * n for _ in range(cell.batch_size)]
    judgements: list[BatchJudgement] = []
    batches = plan.batches(cell)
    for number, batch in enumerate(batches, 1):
        try:
            outs, all_beams = generate_batch(engine, [prompts[d] for d in batch.documents],
                                             settings, cache, timing, judgements)
        except HarnessError:
            raise
        except Exception as exc:
            named = [ids[d] if d < len(ids) else f"#{d}" for d in batch.documents]
            raise BatchFailed(number, len(batches), named, exc) from exc
        for position, (doc, text) in enumerate(zip(batch.documents, outs)):
            texts[position][doc] = text
            if all_beams is not None:
                beams[position][doc] = tuple(all_beams[position])
        tick(len(batch.documents))
    kept = tuple(tuple(b) for b in beams) if cell.beam_width > 1 else ()
    notice = cell_notice(judgements) if cell.batch_size > 1 else None
    return CellOutputs(cell=cell, texts=tuple(tuple(t) for t in texts), beams=kept, notice=notice)


@dataclass(frozen=True)
class _First:
    """The run's first failure that says what kind it is (a server's): later ones of the same
    kind are reported as failing the same way."""

    cell: str
    where: str
    kind: str
    text: str


def failure_text(cell: Cell, failed: BatchFailed, first: _First | None) -> tuple[str, _First | None]:
    """A failed cell's message, and the run's first failure so far. An engine error without a
    ``kind`` is its own one line, as before; a server's names its batch and prompts, and a later
    cell that failed the same way (same kind: a server that went away, no beam search, ...)
    names the first failure instead of showing only its last symptom."""
    text, kind = describe(failed.cause), getattr(failed.cause, "kind", None)
    if not isinstance(kind, str):
        return text, first
    if first is None:
        first = _First(cell.id, failed.where, kind, text)
        return f"{text} (the run's first failure: {cell.id}, {failed.where})", first
    if kind != first.kind:
        return f"{text} ({failed.where})", first
    return (f"failed the same way as the run's first failure, {first.cell} ({first.where}): "
            f"{first.text}; this cell stopped at {failed.where}", first)


class ScoredTexts(TextRows):
    """A cell's texts, ``[position][document]``, as they are scored: each output cut to the
    ScoringCap (a multiple of --max-new-tokens), so that no output makes ROUGE-L, which is
    quadratic in length, take unbounded time. ``whole`` is the outputs as generated: they stay
    whole in generations.jsonl and the generation cache."""

    def __init__(self, whole: Sequence[Sequence[str | None]], cap: ScoringCap) -> None:
        self.whole, self.cap = whole, cap
        self._last: tuple[int, tuple[str | None, ...]] | None = None

    def __len__(self) -> int:
        return len(self.whole)

    def _row(self, position: int) -> tuple[str | None, ...]:
        if self._last is None or self._last[0] != position:
            self._last = (position, tuple(None if t is None else self.cap.cut(t)
                                          for t in self.whole[position]))
        return self._last[1]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self._row(i) for i in range(*index.indices(len(self))))
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self._row(index % len(self))


def output_checks(checks: dict[Cell, tuple[LimitCheck, ...]], capped: dict[Cell, int],
                  max_new_tokens: int) -> dict[Cell, tuple[LimitCheck, ...]]:
    """The cells' checks plus, where outputs were cut before scoring, a warning naming how
    many (an engine that does not stop at --max-new-tokens)."""
    cap = ScoringCap.for_tokens(max_new_tokens)
    out = dict(checks)
    for cell, n in capped.items():
        note = LimitCheck(cell.id, "output_length", "warn",
                          f"{n} outputs ran past {cap.describe()} and were scored on that much; "
                          f"the engine did not stop at --max-new-tokens {max_new_tokens} "
                          "(generations.jsonl keeps them whole)")
        out[cell] = (*out.get(cell, ()), note)
    return out


def generate_all(prep: Prepared, progress: ProgressFactory | None = None,
                 timing: Timing | None = None,
                 on_cell: Callable[[Cell, CellOutputs], None] | None = None,
                 log: GenerationsLog | None = None) -> Generated:
    """Every cell's outputs, each handed to ``on_cell`` as soon as it is complete; an engine
    fault fails its cell, not the run. With ``log`` each complete cell's texts (and beams) go
    to generations.jsonl first and are read back from there, so memory does not grow with
    the run."""
    tick = progress(prep.plan.sequences()) if progress else (lambda k: None)
    outputs: dict[Cell, CellOutputs] = {}
    errors: dict[Cell, str] = {}
    capped: dict[Cell, int] = {}
    cap = ScoringCap.for_tokens(prep.config.max_new_tokens)
    ids = [d.id for d in prep.dataset.documents]
    first: _First | None = None
    for cell in prep.plan.all_cells:
        try:
            out = generate_cell(prep.engine, cell, prep.plan, prep.prompts,
                                prep.config.decoding(cell.beam_width), tick, prep.cache, timing,
                                ids)
        except BatchFailed as failed:
            errors[cell], first = failure_text(cell, failed, first)
            continue
        over = sum(t is not None and cap.cut(t) != t for row in out.texts for t in row)
        if over:
            capped[cell] = over
        # generations.jsonl keeps every output whole; scoring and later stages see it capped
        texts = log.add(cell.id, out.texts, out.beams) if log is not None else out.texts
        out = CellOutputs(cell=cell, texts=ScoredTexts(texts, cap),
                          beams=() if log is not None else out.beams, notice=out.notice)
        outputs[cell] = out
        if on_cell is not None:
            on_cell(cell, out)
    return Generated(outputs=outputs, errors=errors, capped=capped)


def interrupted(prep: Prepared, log: GenerationsLog) -> Interrupted:
    """Ctrl-C while generating: what is kept (cache, generations.jsonl) and how to resume."""
    stats = prep.cache.stats if prep.cache else None
    cells = f"the {log.cells} cells completed so far are in {log.path}"
    if stats is None or not stats.enabled:
        why = stats.reason if stats else "off"
        return Interrupted(f"interrupted: {cells}; the generation cache is {why}, so a rerun "
                           "generates everything again")
    if prep.cache is not None and not prep.cache.writable:
        return Interrupted(f"interrupted: {cells}; the generation cache {stats.reason}, so a "
                           "rerun generates the rest again")
    return Interrupted(f"interrupted: {stats.batches_generated} batches generated this run are "
                       f"kept in the generation cache {stats.folder} and {cells}; {RESUME}")


def follow(prep: Prepared, progress: ProgressFactory | None = None) -> FollowerRun:
    """A rank other than 0: the same generate calls as rank 0, nothing scored or written."""
    try:
        generated = generate_all(prep, progress)
    finally:
        guard.close(prep.engine)
    return FollowerRun(ranks=prep.ranks, engine=prep.engine.info,
                       batches=sum(len(prep.plan.batches(c)) for c in prep.plan.all_cells),
                       sequences=prep.plan.sequences(), seconds=time.perf_counter() - prep.t0,
                       errors={c.id: e for c, e in generated.errors.items()})
