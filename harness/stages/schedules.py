"""The scheduled cells of a run (``--schedules``): every prompt sent into the engine's
in-flight path on each schedule, at the concurrency C, at every beam width of the run;
scored against the same prompt at batch size 1 (``warm``: against its cold run, the
``refill`` run of the same open path) and decided by ``harness.verdict.schedules``.

Outputs of scheduled cells depend on what else was in flight, so they never come from (or go
to) the generation cache. The batch-size-1 outputs they are compared with are the run's own;
a prompt the run did not send at batch size 1 (a sequential run that stopped early) is sent
now, through the cache.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from harness.config import RunConfig
from harness.engines.base import InFlight, NoInFlight
from harness.engines.batching import judge_batch
from harness.errors import HarnessError, describe
from harness.model.cell import Cell
from harness.model.report import Timing
from harness.model.schedule import ScheduledCell, ServedRequest
from harness.model.vocab import Condition, Schedule, Served, Verdict
from harness.plan import Plan
from harness.stages.arrivals import Sent, drive
from harness.stages.generate import generate_batch, output_text
from harness.stages.run import Baseline, Generated, Prepared
from harness.verdict.schedules import Drive, judge
from harness.verdict.scoring import rouge_l

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


def _order(prep: Prepared, schedule: Schedule, concurrency: int) -> list[int]:
    """The documents in the order they are sent: the plan's ring; for ``prefill-mix`` the
    shorter prompts first wave, then one long prompt after every C - 1 short ones."""
    order = list(prep.plan.order)
    if schedule != Schedule.PREFILL_MIX:
        return order
    long = _long(prep)
    short = [d for d in order if d not in long]
    tall = [d for d in order if d in long]
    out: list[int] = []
    step = max(1, concurrency - 1)
    while short or tall:
        out.extend(short[:step])
        short = short[step:]
        if tall:
            out.append(tall.pop(0))
    return out


def _conditions(
    sent: Sequence[Sent], docs: Sequence[int], ids: Sequence[str], long: set[int], used: set[int]
) -> list[ServedRequest]:
    """Each request's place in the run, in arrival order (``docs``: the documents sent, ``ids``
    their names by document), from the timings and what the engine said; ``used``: the slots
    that had served a request of this open path before (updated)."""
    first_answer = min((s.answered for s in sent if s.answered is not None), default=0.0)
    long_sent = [s.sent for s in sent if docs[s.index] in long and s.in_flight > 0]
    out = []
    for s in sorted(sent, key=lambda r: r.answered or 0.0):  # slots free in answer order
        g = s.generation
        slot = g.slot if g else None
        cached = g.cached_tokens if g else None
        reused = None if slot is None else slot in used
        held = {
            Condition.FIRST_WAVE: s.sent < first_answer,
            Condition.JOINED: s.in_flight > 0,
            Condition.FREED_SLOT: bool(reused),
            Condition.LONG_PREFILL: docs[s.index] in long and s.in_flight > 0,
            Condition.BESIDE_PREFILL: any(s.sent < t < (s.answered or 0.0) for t in long_sent if t != s.sent),
            Condition.CACHED: bool(cached),
        }
        if slot is not None:
            used.add(slot)
        out.append(
            ServedRequest(
                document=ids[docs[s.index]],
                rank=s.rank,
                sent=round(s.sent, 6),
                answered=round(s.answered or 0.0, 6),
                in_flight=s.in_flight,
                slot=slot,
                slot_reused=reused,
                cached_tokens=cached,
                conditions=tuple(c for c, on in held.items() if on),
            )
        )
    return sorted(out, key=lambda r: r.rank)


def _scored(
    prep: Prepared,
    requests: list[ServedRequest],
    docs: Sequence[int],
    texts: dict[int, str],
    against: Sequence[str],
    base: Baseline,
) -> tuple[ServedRequest, ...]:
    """Each request's ROUGE-L against the baseline and the reference, and its comparison's
    (``docs``: each request's document, in arrival order as ``requests``)."""
    cut = prep.cap.cut
    refs = [prep.dataset.documents[d].summary for d in docs]
    mine = [cut(texts[d]) for d in docs]
    theirs = [cut(against[d]) for d in docs]
    basis = [base.texts[d] for d in docs]
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


def first_wave_served(sent: Sequence[Sent], max_tokens: int) -> Served | None:
    """How the engine answered the requests sent before any answer came back, where it timed
    them (harness.engines.batching; None: a first wave of one, or no timing)."""
    first = min((s.answered for s in sent if s.answered is not None), default=0.0)
    wave = [s.generation for s in sent if s.sent < first and s.generation is not None]
    timings = [g.timing for g in wave]
    if len(wave) < 2 or any(t is None for t in timings):
        return None
    return judge_batch(timings, [g.text for g in wave], max_tokens).verdict


def _long(prep: Prepared) -> set[int]:
    """The longest quarter of the prompts (ties by the plan's order): prefill-mix's long prompts,
    and what the long-prompt conditions mean in every schedule."""
    lengths, order = prep.lengths(), prep.plan.order
    ranked = sorted(order, key=lambda d: -lengths[d])  # stable: ties keep the plan's order
    return set(ranked[: max(1, round(LONG_SHARE * len(order)))])


@dataclasses.dataclass(frozen=True)
class _Pass:
    """One pass of requests on an open path: each request (arrival order) and its document,
    the texts by document, and how the engine served its first wave."""

    requests: list[ServedRequest]
    docs: list[int]
    texts: dict[int, str]
    served: Served | None


class _Runner:
    """One beam width's scheduled cells: each cold schedule on a freshly opened in-flight path,
    ``warm`` as a second pass on the path ``refill`` warmed."""

    def __init__(
        self, prep: Prepared, width: int, concurrency: int, against: list[str], base: Baseline
    ) -> None:
        self.prep, self.width, self.concurrency = prep, width, concurrency
        self.against, self.base = against, base
        self.settings = prep.config.decoding(width)
        self.long = _long(prep)
        self.ids = [d.id for d in prep.dataset.documents]
        self.timeout = prep.config.batch_timeout
        self.served: set[int] = set()  # slots that served a request of this run (harness.engines.base)

    def _pass(self, flight: InFlight, schedule: Schedule, used: set[int]) -> _Pass:
        c = self.concurrency
        docs = _order(self.prep, schedule, c)
        wave = {Schedule.STAGGERED: 1, Schedule.PREFILL_MIX: c - 1}.get(schedule, c)
        gap = None if schedule == Schedule.STAGGERED else 0.0
        sent = drive(
            flight,
            [self.prep.prompts[d] for d in docs],
            first_wave=max(1, wave),
            cap=c,
            gap=gap,
            timeout=self.timeout,
        )
        texts = {docs[s.index]: output_text(s.generation.text if s.generation else "") for s in sent}
        return _Pass(
            _conditions(sent, docs, self.ids, self.long, used),
            docs,
            texts,
            first_wave_served(sent, self.settings.max_new_tokens),
        )

    def judged(self, drives: list[Drive]) -> list[Drive]:
        """Every drive of this width marked served one after another where any first wave was
        (a queue is the engine's, not one schedule's)."""
        if any(d.served == Served.ONE_AFTER_ANOTHER for d in drives):
            return [dataclasses.replace(d, served=Served.ONE_AFTER_ANOTHER) for d in drives]
        return drives

    def _drive(
        self, schedule: Schedule, done: _Pass, against: Sequence[str], cache: str | None = None
    ) -> Drive:
        scored = _scored(self.prep, done.requests, done.docs, done.texts, against, self.base)
        peak = max((r.in_flight for r in done.requests), default=0) + 1
        return Drive(schedule, self.width, self.concurrency, scored, peak, cache, done.served)

    def run(self, schedule: Schedule, warm: bool) -> list[Drive]:
        """``schedule``'s drive (and, after ``refill``, ``warm``'s on the same open path)."""
        opened = self.prep.engine.in_flight(self.settings)
        if isinstance(opened, NoInFlight):
            raise _NotApplicable(opened.reason)
        used = set() if opened.fresh_slots else self.served
        try:
            first = self._pass(opened, schedule, used)
            # WARM here: the cold run of a warm pass with no refill cell asked for, not reported
            out = [self._drive(schedule, first, self.against)] if schedule != Schedule.WARM else []
            if warm:
                cold = [first.texts.get(d, "") for d in range(len(self.prep.prompts))]
                again = self._pass(opened, Schedule.REFILL, used)
                out.append(self._drive(Schedule.WARM, again, cold, opened.cache))
            return out
        finally:
            opened.close()


class _NotApplicable(Exception):
    """The engine has no in-flight path for this setting (its reason)."""


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


def schedules_line(config: RunConfig, plan: Plan) -> str | None:
    """The line said before a run: what its scheduled cells may send (None: none run)."""
    if config.shard is not None:
        return None
    return config.schedules.describe([c.batch_size for c in plan.cells], len(plan.order), config.beam_widths)


def run_schedules(
    prep: Prepared, generated: Generated, bases: dict[int, Baseline], timing: Timing
) -> tuple[ScheduledCell, ...]:
    """Every scheduled cell the run asks for (``--schedules``), decided; an engine without an
    in-flight path gives cells that are not applicable, with its reason."""
    chosen = [s for s in prep.config.schedules.schedules if s != Schedule.BULK]
    if not chosen:
        return ()
    t = time.perf_counter()
    concurrency = prep.config.schedules.concurrency_for([c.batch_size for c in prep.plan.cells])
    away = _elsewhere(prep)
    if away is not None:
        return tuple(
            c
            for w in prep.config.beam_widths
            for c in _cells(chosen, w, concurrency, Verdict.NOT_APPLICABLE, away)
        )
    drives: list[Drive] = []
    fixed: list[ScheduledCell] = []
    for width in prep.config.beam_widths:
        if width not in bases:
            fixed += _cells(
                chosen,
                width,
                concurrency,
                Verdict.ERROR,
                f"no batch-size-1 outputs at beam width {width} to compare with",
            )
            continue
        runner = _Runner(prep, width, concurrency, _comparison(prep, generated, width, timing), bases[width])
        cold: list[Schedule] = [s for s in chosen if s != Schedule.WARM]
        if Schedule.WARM in chosen and Schedule.REFILL not in cold:
            cold.append(Schedule.WARM)  # its cold run is a refill pass, not reported as a cell
        ran: list[Drive] = []
        for schedule in cold:
            warm = Schedule.WARM in chosen and schedule in (Schedule.REFILL, Schedule.WARM)
            names = [schedule] + ([Schedule.WARM] if warm and schedule != Schedule.WARM else [])
            try:
                ran += runner.run(schedule, warm)
            except _NotApplicable as exc:
                fixed += _cells(chosen, width, concurrency, Verdict.NOT_APPLICABLE, str(exc))
                break
            except HarnessError:
                raise
            except Exception as exc:  # the engine's own errors (RequestsFailed: a request's): the cell's
                fixed += _cells(names, width, concurrency, Verdict.ERROR, describe(exc))
        drives += runner.judged(ran)
    timing.schedules_s = time.perf_counter() - t
    config = prep.config
    decided = judge(drives, config.tolerance, config.alpha, config.deterministic)
    return tuple(sorted((*decided, *fixed), key=lambda c: (c.beam_width, list(Schedule).index(c.schedule))))
