"""Calibrate's scheduled cells: each in-flight model's engine driven on every schedule by the
run's own stage (``harness.stages.schedules.drive_width``), round by round, then trials that
decide resampled requests with the run's own verdict (``harness.verdict.schedules.judge``).

A round sends a fresh draw of ``--prompts`` prompts from the pool, in a fresh order, on every
schedule at the engine's max_batch_size, to an engine with its own drift seed; each request is
scored against the same prompt at batch size 1 on that engine (``warm``: against its cold
run). A round is a fresh sample of when each request arrived, so it is never replayed from the
generation cache (its ``Ground`` has none): the rounds are the cost, a few seconds each, on ``--jobs`` worker processes. A trial takes, for every schedule and arrival rank,
the request of that rank from a random round (its conditions, scores and damage as they
were), and judges the trial's cells in the run's Holm family at their share of alpha, as a
run does (the bulk tests' share held by clean ones: these faults are the ones bulk cells
cannot see).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from harness.bounds import ScoringCap
from harness.config import DecodingSettings
from harness.errors import EngineError
from harness.model.schedule import ScheduledCell
from harness.model.vocab import Condition, Schedule, Verdict
from harness.tools.calibrate.generation import Pool, engine_dir
from harness.tools.calibrate.models import Model
from harness.tools.calibrate.settings import Settings
from harness.verdict.schedules import Drive, is_damaged, judge

SCHEDULES = (Schedule.STAGGERED, Schedule.REFILL, Schedule.PREFILL_MIX, Schedule.WARM)
Round = dict[Schedule, Drive]


@dataclass(frozen=True)
class FlightJob:
    """One round of one model on every schedule (runs in a worker process): its engine, the
    pool and the round's draw from it."""

    name: str
    engine_dir: str
    concurrency: int
    prompts: tuple[str, ...]
    references: tuple[str, ...]
    chosen: tuple[int, ...]  # the pool's prompts this round sends, in its order
    max_new_tokens: int
    round: int


def jobs(m: Model, pool: Pool, s: Settings) -> list[FlightJob]:
    """``s.flight_rounds`` rounds of ``m`` (module docstring); engines built here, once."""
    out = []
    for r in range(s.flight_rounds):
        draw = np.random.default_rng([s.seed, r, 33]).permutation(len(pool.prompts))[: s.prompts]
        out.append(
            FlightJob(
                m.name,
                str(engine_dir(pool, m, r)),
                m.limits.max_batch_size or 8,
                pool.prompts,
                pool.references,
                tuple(int(i) for i in draw),
                s.max_new_tokens,
                r,
            )
        )
    return out


def drive_round(job: FlightJob) -> Round:
    """One round: the draw sent on every schedule by the run's own stage, each request scored
    against the same prompt at batch size 1 on the same engine."""
    import torch

    from harness.engines.emulator.engine import EmulatorEngine
    from harness.stages.generate import generate_batch
    from harness.stages.schedules import Ground, drive_width

    torch.set_num_threads(1)
    settings = DecodingSettings(max_new_tokens=job.max_new_tokens, beam_width=1, length_penalty=1.0)
    engine = EmulatorEngine(job.engine_dir)
    try:
        prompts = [job.prompts[i] for i in job.chosen]
        alone = [generate_batch(engine, [p], settings)[0][0] for p in prompts]
        ground = Ground(
            engine=engine,
            prompts=prompts,
            ids=[f"cal-{i}" for i in job.chosen],
            references=[job.references[i] for i in job.chosen],
            lengths=engine.count_tokens(prompts),
            order=range(len(prompts)),  # the draw is already shuffled
            baseline=alone,
            against=alone,
            settings=settings,
            concurrency=job.concurrency,
            cap=ScoringCap.for_tokens(job.max_new_tokens),
            timeout=None,
        )
        drives, failed = drive_width(ground, SCHEDULES)
    finally:
        engine.close()
    if failed:
        raise EngineError(
            f"calibrate: {job.name} round {job.round}: {failed[0].id} {failed[0].verdict}: {failed[0].message}"
        )
    return {d.schedule: d for d in drives}


@dataclass(frozen=True)
class FlightTrial:
    """One trial's scheduled cells, judged, against what is true of the model."""

    cells: tuple[ScheduledCell, ...]
    expected: Condition | None
    # the requests (schedule, rank) whose prompt lost content to benign drift alone in the same
    # round on the drifting twin: damage the fault did not do
    benign: frozenset[tuple[Schedule, int]] = frozenset()

    @property
    def failed(self) -> bool:
        """The run fails on its scheduled cells (a cell failed, or did not happen)."""
        return any(c.verdict in (Verdict.FAIL, Verdict.UNTESTED) for c in self.cells)

    @property
    def detected(self) -> bool:
        """A scheduled cell failed on its requests' scores (not for want of overlap)."""
        return any(c.verdict == Verdict.FAIL for c in self.cells)

    def _named(self) -> list[Condition | None]:
        return [c.separated_by for c in self.cells if c.verdict == Verdict.FAIL]

    @property
    def named(self) -> bool:
        """A failing cell names the fault's condition, and none names another (a cell whose
        damage no condition confines names none)."""
        return self.expected is not None and self.expected in self._named() and not self.wrong

    @property
    def exact(self) -> bool:
        """Named, and in every failing cell no damaged request lies outside the fault's condition
        (but those that benign drift alone damaged)."""
        return self.named and all(
            not any(
                r.damaged and self.expected not in r.conditions and (c.schedule, r.rank) not in self.benign
                for r in c.requests
            )
            for c in self.cells
            if c.verdict == Verdict.FAIL
        )

    @property
    def wrong(self) -> bool:
        """A failing cell names another condition than the fault's."""
        return any(n is not None and n != self.expected for n in self._named())


Benign = frozenset[tuple[int, Schedule, str]]  # (round, schedule, document) drift alone damaged


def benign(twin: Sequence[Round]) -> Benign:
    """The requests of a drifting twin's rounds that lost content (``is_damaged``): drift
    flips a prompt's near-tie by a hash of the prompt and the round's drift seed, whatever else
    ran, so the same prompt in the same round of a faulty engine on that drift loses as much."""
    return frozenset(
        (j, schedule, r.document)
        for j, done in enumerate(twin)
        for schedule, drive in done.items()
        for r in drive.requests
        if is_damaged(r)
    )


def trial(
    m: Model, done: Sequence[Round], rng: np.random.Generator, s: Settings, drifted: Benign = frozenset()
) -> FlightTrial:
    """One trial of ``m`` over its rounds (module docstring); ``drifted``: what its drift alone
    damages."""
    drives = []
    excused: set[tuple[Schedule, int]] = set()
    for schedule in SCHEDULES:
        ranks = len(done[0][schedule].requests)
        picks = rng.integers(len(done), size=ranks)
        requests = tuple(done[j][schedule].requests[k] for k, j in enumerate(picks))
        excused |= {
            (schedule, k) for k, j in enumerate(picks) if (int(j), schedule, requests[k].document) in drifted
        }
        first = done[int(picks[0])][schedule]
        drives.append(replace(first, requests=requests, peak=max(r.in_flight for r in requests) + 1))
    return FlightTrial(judge(drives, s.tolerance, s.alpha), m.flight, frozenset(excused))


@dataclass(frozen=True)
class FlightOutcome:
    """One in-flight model's rates over all trials, and its rounds' changed outputs."""

    model: Model
    trials: int
    failed: int  # trials whose scheduled cells fail the run
    detected: int  # trials in which a scheduled cell failed on its scores
    named: int
    exact: int
    wrong: int
    changed: dict[Schedule, float]  # per schedule: the rounds' share of outputs unlike their comparison's

    @property
    def should_fail(self) -> bool:
        return self.model.fails_in_flight


def calibrate_flight(
    chosen: Sequence[Model],
    pool: Pool,
    s: Settings,
    key: Callable[[str], int],
    say: Callable[[str], None],
    models: Sequence[Model] = (),
) -> list[FlightOutcome]:
    """Every in-flight model's rounds (on ``s.jobs`` worker processes), then its trials; a
    faulty model on drift is held against its drifting twin (among ``models``), whose rounds
    are driven too."""
    if not chosen:
        return []
    twins = {m.twin for m in chosen if m.fails_in_flight and m.drift}
    extra = [m for m in models if m.name in twins and m not in chosen]
    planned = {m.name: jobs(m, pool, s) for m in (*chosen, *extra)}
    t0 = time.perf_counter()
    every = [j for js in planned.values() for j in js]
    say(f"in flight: {len(every)} rounds of {len(chosen)} models on every schedule, {s.jobs} worker(s) ...")
    if s.jobs > 1:
        with ProcessPoolExecutor(max_workers=s.jobs) as workers:
            driven = list(workers.map(drive_round, every))
    else:
        driven = [drive_round(j) for j in every]
    seconds = time.perf_counter() - t0
    say(f"in flight: driven in {seconds:.0f} s")
    done: dict[str, list[Round]] = {name: [] for name in planned}
    for job, got in zip(every, driven):
        done[job.name].append(got)
    out = []
    for m in chosen:
        drifted = benign(done[m.twin]) if m.fails_in_flight and m.drift else frozenset()
        trials = [
            trial(m, done[m.name], np.random.default_rng([s.seed, key(m.name), t, 33]), s, drifted)
            for t in range(s.trials)
        ]
        changed = {
            sc: float(np.mean([r.changed for d in done[m.name] for r in d[sc].requests])) for sc in SCHEDULES
        }
        out.append(
            FlightOutcome(
                m,
                s.trials,
                failed=sum(g.failed for g in trials),
                detected=sum(g.detected for g in trials),
                named=sum(g.named for g in trials),
                exact=sum(g.exact for g in trials),
                wrong=sum(g.wrong for g in trials),
                changed=changed,
            )
        )
    return out
