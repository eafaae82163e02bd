"""Calibrate from start to end: choose the models, build and generate, then the trials."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from harness.errors import ConfigError
from harness.model.cell import Cell
from harness.model.vocab import Rotation
from harness.plan import SPARSE_MIN
from harness.tools.calibrate.generation import (
    BatchSizeOne,
    Observations,
    Pool,
    generate,
    jobs,
    make_pool,
    observe,
)
from harness.tools.calibrate.inflight import FlightOutcome, calibrate_flight
from harness.tools.calibrate.models import Model, flight_models, models
from harness.tools.calibrate.settings import Settings
from harness.tools.calibrate.table import Outcome
from harness.tools.calibrate.trials import model_key, trial


def _chosen(s: Settings) -> tuple[tuple[Model, ...], tuple[Model, ...], tuple[Model, ...]]:
    """The bulk models asked for, every bulk model, and the in-flight models asked for."""
    if s.prompts > s.pool:
        raise ConfigError(
            f"--prompts {s.prompts} exceeds --pool {s.pool}; a trial draws its prompts from the pool"
        )
    if s.horizon < 1.0 and (s.looks > 1 or s.rotation != Rotation.FULL):
        raise ConfigError(
            f"--horizon {s.horizon:g} bounds what one look at that share of a full rotation could find, "
            "so it takes the fixed full-rotation design: give --looks 1 (and no --rotation sparse)"
        )
    everything = models(s.rounds, s.fraction, s.position, s.sweep_to)
    flying = flight_models(everything)
    known = list(dict.fromkeys(m.name for m in (*everything, *flying)))
    unknown = set(s.only) - set(known)
    if unknown:
        raise ConfigError(
            f"--only {','.join(s.only)}: unknown model(s) {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(known)}"
        )
    chosen = tuple(m for m in everything if m.name in s.only) if s.only else everything
    flights = tuple(m for m in flying if m.name in s.only) if s.only else flying
    if any(m.sweep for m in chosen) and s.prompts < SPARSE_MIN * s.sweep_to:
        raise ConfigError(
            f"--sweep-to {s.sweep_to}: a sweep needs at least "
            f"{SPARSE_MIN * s.sweep_to} prompts ({SPARSE_MIN} per position of its "
            f"largest batch); give --prompts {SPARSE_MIN * s.sweep_to} (and a --pool "
            "at least as large), or leave the sweep models out with --only"
        )
    return chosen, everything, flights


def _effects(
    obs: Observations, m: Model, levels: dict[int, BatchSizeOne]
) -> tuple[dict[Cell, float], dict[Cell, float]]:
    """Per cell of the model: the share of outputs unlike batch size 1's, and the pool's mean
    quality against the references minus batch size 1's."""
    differing = {c: float(obs.differs[c].mean()) for c in m.cells}
    delta = {c: float(obs.quality[c].mean() - levels[c.beam_width].quality.mean()) for c in m.cells}
    return differing, delta


def run_calibration(
    s: Settings, say: Callable[[str], None] = print
) -> tuple[list[Outcome], list[FlightOutcome]]:
    """Build, generate, score, then run the trials: one outcome per bulk model, then one per
    in-flight model (its scheduled cells)."""
    chosen, everything, flights = _chosen(s)
    pool = make_pool(s)
    bulk = _bulk(chosen, everything, pool, s, say) if chosen else []
    return bulk, calibrate_flight(flights, pool, s, model_key, say, flight_models(everything))


def _bulk(
    chosen: tuple[Model, ...],
    everything: tuple[Model, ...],
    pool: Pool,
    s: Settings,
    say: Callable[[str], None],
) -> list[Outcome]:
    """The bulk models' rotation rounds, then their trials."""
    from harness.engines.emulator.engine import EmulatorEngine
    from harness.verdict.scoring import rouge_l

    planned = jobs(pool, chosen, everything, s)
    t0 = time.perf_counter()
    say(
        f"generating: {len(planned)} rotation rounds over a pool of {s.pool} prompts on {s.jobs} worker(s) ..."
    )
    if s.jobs > 1:
        with ProcessPoolExecutor(max_workers=s.jobs) as workers:
            results = list(workers.map(generate, [j for _, _, j in planned]))
    else:
        results = [generate(j) for _, _, j in planned]
    say(f"generated in {time.perf_counter() - t0:.0f} s")
    lengths = EmulatorEngine(planned[0][2].engine_dir).count_tokens(list(pool.prompts))
    bs1 = {c.beam_width: texts[0] for c, texts in results[0].items() if c.batch_size == 1}
    levels = {
        w: BatchSizeOne(np.asarray(rouge_l(t, t)), np.asarray(rouge_l(pool.references, t)))
        for w, t in bs1.items()
    }
    observed = {
        name: observe([(r, out) for (n, r, _), out in zip(planned, results) if n == name], pool, bs1, lengths)
        for name in dict.fromkeys(n for n, _, _ in planned)
    }
    outcomes = []
    for m in chosen:
        got = [
            trial(
                m,
                observed[m.name],
                observed.get(m.twin, observed["healthy"]),
                levels,
                np.random.default_rng([s.seed, model_key(m.name), t]),
                s,
            )
            for t in range(s.trials)
        ]
        differing, delta = _effects(observed[m.name], m, levels)
        outcomes.append(
            Outcome(
                m,
                s.trials,
                sum(g.flagged for g in got),
                sum(g.exact for g in got),
                sum(g.named for g in got),
                wrong=sum(g.wrong for g in got),
                boundary=sum(g.boundary for g in got),
                differing=differing,
                quality_delta=delta,
                cost=tuple(g.spent / g.fixed for g in got),
            )
        )
    return outcomes
