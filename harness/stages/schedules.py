"""The scheduled cells of a run (``--schedules``): every prompt sent into the engine's
in-flight path on each schedule, at the concurrency C, at every beam width of the run;
scored against the same prompt at batch size 1 (``warm``: against its cold run, the
``refill`` run of the same open path) and decided by ``harness.verdict.schedules``.

Outputs of scheduled cells depend on what else was in flight and when, so no single request is
ever taken from the generation cache. A whole beam width's passes are: kept where every schedule
ran and happened as planned, and replayed by a rerun with the same key (the engine's
fingerprint, the settings, and what the passes send: ``harness.stages.recorded``), their
conditions, scores and verdicts computed again from the records, each cell saying it was
replayed; ``--no-cache`` sends them again. A cached rerun thus judges the same evidence, as it
does for the bulk cells. The batch-size-1 outputs they are compared with are the run's own; a
prompt the run did not send at batch size 1 (a sequential run that stopped early) is sent now,
through the cache.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from harness.bounds import ScoringCap
from harness.config import DecodingSettings, RunConfig
from harness.engines.base import Engine, NoInFlight
from harness.errors import HarnessError, describe
from harness.model.cell import Cell
from harness.model.json import Json
from harness.model.report import Timing
from harness.model.schedule import ScheduledCell, ServedRequest
from harness.model.vocab import Schedule, Served, Verdict
from harness.plan import Plan
from harness.stages.arrivals import Sent, drive
from harness.stages.conditions import conditions, first_wave_served
from harness.stages.generate import generate_batch, output_text
from harness.stages.recorded import Opened, Shape, dumped, loaded, sending_plan
from harness.stages.run import Baseline, Generated, Prepared
from harness.storage.cache import GenerationCache
from harness.verdict.schedules import Drive, Flights, not_happened
from harness.verdict.scoring import rouge_l
from harness.verdict.statistics import SCHEDULE_SHARE

LONG_SHARE = 0.25  # prefill-mix: the longest quarter of the prompts are its long prompts


def _comparison(prep: Prepared, generated: Generated, width: int, timing: Timing) -> list[str]:
    """Batch size 1's output of every prompt at ``width`` (sent now where the run lacks it)."""
    row = generated.outputs[Cell(1, width)].texts.row(0) if Cell(1, width) in generated.outputs else ()
    out = []
    for d, prompt in enumerate(prep.prompts):
        text = row[d] if d < len(row) else None
        if text is None:
            texts, _ = generate_batch(prep.engine, [prompt], prep.config.decoding(width), prep.cache, timing)
            text = texts[0]
        out.append(text)
    return out


@dataclasses.dataclass(frozen=True)
class Ground:
    """What one beam width's scheduled cells are sent and scored with: the engine; the prompts
    in dataset order with their ids, reference summaries (None: none) and lengths; the order a
    schedule sends them in; the texts agreement is measured against (goldens, else batch
    size 1) and batch size 1's own outputs, each request's paired comparison."""

    engine: Engine
    prompts: Sequence[str]
    ids: Sequence[str]
    references: Sequence[str | None]
    lengths: Sequence[int]
    order: Sequence[int]
    baseline: Sequence[str]
    against: Sequence[str]
    settings: DecodingSettings
    concurrency: int
    cap: ScoringCap
    timeout: float | None
    cache: GenerationCache | None = None  # where passes are kept and replayed (None: never)

    @property
    def long(self) -> frozenset[int]:
        """The longest quarter of the prompts (ties by the order): prefill-mix's long prompts,
        and what the long-prompt conditions mean in every schedule."""
        ranked = sorted(self.order, key=lambda d: -self.lengths[d])  # stable: ties keep the order
        return frozenset(ranked[: max(1, round(LONG_SHARE * len(self.order)))])


def _order(ground: Ground, schedule: Schedule) -> list[int]:
    """The documents in the order they are sent: the plan's ring; for ``prefill-mix`` the
    shorter prompts first wave, then one long prompt after every C - 1 short ones, the longest
    first (the one an engine is likeliest to prefill in chunks goes in beside the first wave)."""
    order = list(ground.order)
    if schedule != Schedule.PREFILL_MIX:
        return order
    long = ground.long
    short = [d for d in order if d not in long]
    tall = sorted((d for d in order if d in long), key=lambda d: -ground.lengths[d])  # stable
    out: list[int] = []
    step = max(1, ground.concurrency - 1)
    while short or tall:
        out.extend(short[:step])
        short = short[step:]
        if tall:
            out.append(tall.pop(0))
    return out


def _scored(
    ground: Ground,
    requests: list[ServedRequest],
    docs: Sequence[int],
    texts: dict[int, str],
    against: Sequence[str],
) -> tuple[ServedRequest, ...]:
    """Each request's ROUGE-L against the baseline and the reference, and its comparison's
    (``docs``: each request's document, in arrival order as ``requests``)."""
    cut = ground.cap.cut
    refs = [ground.references[d] for d in docs]
    mine = [cut(texts[d]) for d in docs]
    theirs = [cut(against[d]) for d in docs]
    basis = [ground.baseline[d] for d in docs]
    agreement, agreement_bs1 = rouge_l(basis, mine), rouge_l(basis, theirs)
    have = [i for i, r in enumerate(refs) if r is not None]
    quality = dict(zip(have, rouge_l([refs[i] or "" for i in have], [mine[i] for i in have])))
    quality_bs1 = dict(zip(have, rouge_l([refs[i] or "" for i in have], [theirs[i] for i in have])))
    return tuple(
        dataclasses.replace(
            r,
            agreement=agreement[i],
            agreement_bs1=agreement_bs1[i],
            quality=quality.get(i),
            quality_bs1=quality_bs1.get(i),
            changed=mine[i] != theirs[i],
        )
        for i, r in enumerate(requests)
    )


@dataclasses.dataclass(frozen=True)
class _Pass:
    """One pass of requests on an open path: each request (arrival order) and its document,
    the texts by document, and how the engine served its first wave."""

    requests: list[ServedRequest]
    docs: list[int]
    texts: dict[int, str]
    served: Served | None


def _shapes(g: Ground, schedule: Schedule, warm: bool) -> list[Shape]:
    """How each pass of ``schedule``'s path sends (``warm``: a refill pass again after it)."""
    c = g.concurrency
    out = []
    for kind in [schedule] + ([Schedule.REFILL] if warm else []):
        wave = {Schedule.STAGGERED: 1, Schedule.PREFILL_MIX: c - 1}.get(kind, c)
        gap = None if kind == Schedule.STAGGERED else 0.0
        prompts = tuple(g.prompts[d] for d in _order(g, kind))
        out.append(Shape(prompts, max(1, wave), c, gap))
    return out


class _Runner:
    """One beam width's scheduled cells: each cold schedule on a freshly opened in-flight path,
    ``warm`` as a second pass on the path ``refill`` warmed; or each path's passes as a run
    recorded them (``harness.stages.recorded``), replayed."""

    def __init__(self, ground: Ground) -> None:
        self.ground = ground
        self.long = ground.long
        self.served: set[int] = set()  # slots that served a request of this run (harness.engines.base)
        self.opened: list[Opened] = []  # each path's passes, as sent or replayed

    def _pass(self, schedule: Schedule, sent: Sequence[Sent], used: set[int]) -> _Pass:
        g = self.ground
        docs = _order(g, schedule)
        texts = {docs[s.index]: output_text(s.generation.text if s.generation else "") for s in sent}
        return _Pass(
            conditions(sent, docs, g.ids, self.long, used),
            docs,
            texts,
            first_wave_served(sent, g.settings.max_new_tokens),
        )

    def _drive(
        self, schedule: Schedule, done: _Pass, against: Sequence[str], cache: str | None, replayed: bool
    ) -> Drive:
        g = self.ground
        scored = _scored(g, done.requests, done.docs, done.texts, against)
        peak = max((r.in_flight for r in done.requests), default=0) + 1
        return Drive(
            schedule, g.settings.beam_width, g.concurrency, scored, peak, cache, done.served, replayed
        )

    def _send(self, schedule: Schedule, warm: bool) -> Opened:
        """``schedule``'s passes sent on a freshly opened in-flight path."""
        opened = self.ground.engine.in_flight(self.ground.settings)
        if isinstance(opened, NoInFlight):
            raise _NotApplicable(opened.reason)
        try:
            passes = tuple(
                tuple(
                    drive(
                        opened,
                        shape.prompts,
                        first_wave=shape.first_wave,
                        cap=shape.cap,
                        gap=shape.gap,
                        timeout=self.ground.timeout,
                    )
                )
                for shape in _shapes(self.ground, schedule, warm)
            )
            return Opened(passes, opened.cache, opened.fresh_slots)
        finally:
            opened.close()

    def run(self, schedule: Schedule, warm: bool, recorded: Opened | None = None) -> list[Drive]:
        """``schedule``'s drive (and, after ``refill``, ``warm``'s on the same open path), sent
        now or, given ``recorded``, replayed."""
        path = recorded if recorded is not None else self._send(schedule, warm)
        self.opened.append(path)
        replayed = recorded is not None
        used = set() if path.fresh_slots else self.served
        first = self._pass(schedule, path.passes[0], used)
        # WARM here: the cold run of a warm pass with no refill cell asked for, not reported
        out = (
            [self._drive(schedule, first, self.ground.against, None, replayed)]
            if schedule != Schedule.WARM
            else []
        )
        if warm:
            cold = [first.texts.get(d, "") for d in range(len(self.ground.prompts))]
            again = self._pass(Schedule.REFILL, path.passes[1], used)
            out.append(self._drive(Schedule.WARM, again, cold, path.cache, replayed))
        return out


class _NotApplicable(Exception):
    """The engine has no in-flight path for this setting (its reason)."""


def drive_width(ground: Ground, chosen: Sequence[Schedule]) -> tuple[list[Drive], list[ScheduledCell]]:
    """Every schedule of ``chosen`` (not ``bulk``) at one beam width, not yet judged: each
    cold schedule on a freshly opened in-flight path, ``warm`` as a second pass on the path a
    ``refill`` pass warmed; and the cells that could not run (not applicable, or the engine's
    error), decided. Drives of an engine that answered any first wave one after another are all
    marked so (a queue is the engine's, not one schedule's).

    With a generation cache the beam width's passes are kept where every schedule ran and
    happened as planned (``not_happened``), and replayed where a run with the same key kept
    them and they still happened under this run's rules (every request within its
    --batch-timeout, every schedule as planned); else they are sent again, and kept anew."""
    width, c = ground.settings.beam_width, ground.concurrency
    cold: list[Schedule] = [s for s in chosen if s not in (Schedule.WARM, Schedule.BULK)]
    if Schedule.WARM in chosen and Schedule.REFILL not in cold:
        cold.append(Schedule.WARM)  # its cold run is a refill pass, not reported as a cell
    warms = [Schedule.WARM in chosen and s in (Schedule.REFILL, Schedule.WARM) for s in cold]
    shapes = [_shapes(ground, s, warm) for s, warm in zip(cold, warms)]
    key = sending_plan(list(zip(cold, shapes)))
    kept = _kept(ground, key, shapes)
    if kept is not None:
        replayed = _Runner(ground)
        ran = _queued([d for i, (s, w) in enumerate(zip(cold, warms)) for d in replayed.run(s, w, kept[i])])
        if all(not_happened(d) is None for d in ran):
            assert ground.cache is not None
            ground.cache.replayed(sum(len(p.passes) for p in kept))
            return ran, []
    runner = _Runner(ground)
    sent: list[Drive] = []
    fixed: list[ScheduledCell] = []
    for schedule, warm in zip(cold, warms):
        names = [schedule] + ([Schedule.WARM] if warm and schedule != Schedule.WARM else [])
        try:
            sent += runner.run(schedule, warm)
        except _NotApplicable as exc:
            return [], _cells(chosen, width, c, Verdict.NOT_APPLICABLE, str(exc))
        except HarnessError:
            raise
        except Exception as exc:  # the engine's own errors (RequestsFailed: a request's): the cell's
            fixed += _cells(names, width, c, Verdict.ERROR, describe(exc))
    ran = _queued(sent)
    if ground.cache is not None and not fixed and all(not_happened(d) is None for d in ran):
        ground.cache.put_passes(ground.settings, key, dumped(runner.opened))
    return ran, fixed


def _queued(ran: list[Drive]) -> list[Drive]:
    """Every drive marked as answered one after another where any first wave was."""
    if any(d.served == Served.ONE_AFTER_ANOTHER for d in ran):
        return [dataclasses.replace(d, served=Served.ONE_AFTER_ANOTHER) for d in ran]
    return ran


def _kept(ground: Ground, key: Json, shapes: Sequence[Sequence[Shape]]) -> list[Opened] | None:
    """The beam width's paths as a run kept them for ``key`` (None: none kept; one that cannot
    be read, which the cache counts as rejected; or one with a request that took longer than
    this run's --batch-timeout allows, which this run would have failed)."""
    cache = ground.cache
    stored = cache.get_passes(ground.settings, key) if cache is not None else None
    if cache is None or stored is None:
        return None
    paths = loaded(stored, shapes)
    if paths is None:
        cache.rejected()
        return None
    took = [(s.answered or 0.0) - s.sent for p in paths for sent in p.passes for s in sent]
    if ground.timeout is not None and max(took, default=0.0) > ground.timeout:
        return None
    return paths


def _ground(prep: Prepared, generated: Generated, base: Baseline, concurrency: int, timing: Timing) -> Ground:
    """A run's ground for one beam width's scheduled cells."""
    width = base.beam_width
    return Ground(
        engine=prep.engine,
        prompts=prep.prompts,
        ids=[d.id for d in prep.dataset.documents],
        references=[d.summary for d in prep.dataset.documents],
        lengths=prep.lengths(),
        order=prep.plan.order,
        baseline=base.texts,
        against=_comparison(prep, generated, width, timing),
        settings=prep.config.decoding(width),
        concurrency=concurrency,
        cap=prep.cap,
        timeout=prep.config.batch_timeout,
        cache=prep.cache,
    )


def _cells(
    chosen: Sequence[Schedule], width: int, concurrency: int, verdict: Verdict, message: str
) -> list[ScheduledCell]:
    return [ScheduledCell(s, width, concurrency, verdict, message) for s in chosen]


def _elsewhere(prep: Prepared) -> str | None:
    """Why this run cannot send the scheduled cells' requests (None: it can)."""
    if prep.config.shard is not None:
        return "a --shard run leaves the schedules to an unsharded run (merge does not combine them)"
    if prep.ranks.world_size > 1:
        return (
            "under MPI every rank takes part in each engine call, and the schedules' requests are sent "
            "by rank 0 alone"
        )
    return None


def planned(prep: Prepared) -> Flights:
    """The scheduled cells a run asks for, before it sends them: none yet, but their share of
    alpha kept wherever it asks for some. The family is the run's design, fixed before anything
    runs: a shard, an MPI run or an engine without an in-flight path keeps the share as the
    unsharded run on an engine with one does, so none is corrected more liberally."""
    chosen = [s for s in prep.config.schedules.schedules if s != Schedule.BULK]
    return Flights(share=SCHEDULE_SHARE) if chosen else Flights()


def schedules_line(config: RunConfig, plan: Plan) -> str | None:
    """The line said before a run: what its scheduled cells may send (None: none run)."""
    if config.shard is not None:
        return None
    return config.schedules.describe(
        [c.batch_size for c in plan.cells], len(plan.order), config.beam_widths, cached=not config.no_cache
    )


def run_schedules(
    prep: Prepared, generated: Generated, bases: dict[int, Baseline], timing: Timing
) -> Flights:
    """Every scheduled cell the run asks for (``--schedules``), not yet decided (their tests
    join the run's Holm family: ``harness.verdict.decide``); an engine without an in-flight
    path gives cells that are not applicable, with its reason."""
    chosen = [s for s in prep.config.schedules.schedules if s != Schedule.BULK]
    share = planned(prep).share
    if not chosen:
        return Flights()
    t = time.perf_counter()
    concurrency = prep.config.schedules.concurrency_for([c.batch_size for c in prep.plan.cells])
    away = _elsewhere(prep)
    if away is not None:
        return Flights(
            fixed=tuple(
                c
                for w in prep.config.beam_widths
                for c in _cells(chosen, w, concurrency, Verdict.NOT_APPLICABLE, away)
            ),
            share=share,
        )
    drives: list[Drive] = []
    fixed: list[ScheduledCell] = []
    # widest first: the bulk cells ran in order of beam width, so an engine that loads a runner
    # per width (trtllm) still holds the widest one, and loads each other width once more
    for width in sorted(prep.config.beam_widths, reverse=True):
        if width not in bases:
            fixed += _cells(
                chosen,
                width,
                concurrency,
                Verdict.ERROR,
                f"no batch-size-1 outputs at beam width {width} to compare with",
            )
            continue
        ran, failed = drive_width(_ground(prep, generated, bases[width], concurrency, timing), chosen)
        drives += ran
        fixed += failed
    timing.schedules_s = time.perf_counter() - t
    return Flights(tuple(drives), tuple(fixed), share)
