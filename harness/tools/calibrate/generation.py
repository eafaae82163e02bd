"""Calibrate's generations: the prompt pool, each model's engines and rotation rounds over the
pool (generated through the run's generate stage, in worker processes), and the scores of every
output against batch size 1 and the references, kept per round, position and prompt."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.config import DecodingSettings
from harness.config.basics import DEFAULT_PROMPT_TEMPLATE, harness_cache_dir
from harness.engines.emulator.drift import Drift
from harness.model.cell import Cell
from harness.plan import Plan
from harness.storage import confine
from harness.tools.calibrate.models import POOL_SEED, Model, Target
from harness.tools.calibrate.settings import Settings


@dataclass(frozen=True)
class BatchSizeOne:
    """Batch size 1's per-prompt agreement (with itself) and quality over the whole pool."""

    agreement: np.ndarray
    quality: np.ndarray


@dataclass(frozen=True)
class Job:
    """Generate one round of one model's cells over the pool (runs in a worker process)."""

    engine_dir: str
    cells: tuple[Cell, ...]
    prompts: tuple[str, ...]
    order: tuple[int, ...]
    max_new_tokens: int
    cache_dir: str | None


def ring(order: Sequence[int], cells: Sequence[Cell]) -> Plan:
    """The full rotation of ``cells`` over the pool in ``order``, as a run plans it."""
    return Plan(cells=tuple(cells), reference_cells=(), order=tuple(order), seed=0)


def generate(job: Job) -> dict[Cell, list[list[str]]]:
    """texts[cell][position][document] for one rotation round over the pool."""
    import torch

    from harness.engines.emulator.engine import EmulatorEngine
    from harness.stages.generate import generate_cell
    from harness.storage.cache import GenerationCache, engine_fingerprint
    from harness.storage.cache_key import engine_code

    torch.set_num_threads(1)
    engine = EmulatorEngine(job.engine_dir)
    cache = GenerationCache(
        Path(job.cache_dir) if job.cache_dir else None,
        engine_fingerprint(engine.info, code=engine_code(type(engine))),
    )
    plan = ring(job.order, job.cells)
    out: dict[Cell, list[list[str]]] = {}
    for cell in job.cells:
        settings = DecodingSettings(
            max_new_tokens=job.max_new_tokens, beam_width=cell.beam_width, length_penalty=1.0
        )
        got = generate_cell(engine, cell, plan, job.prompts, settings, cache=cache)
        out[cell] = [[t or "" for t in row] for row in got.texts.rows()]  # full ring: no None
    return out


@dataclass
class Observations:
    """Per cell, arrays [round, position, document]: agreement with batch size 1, quality
    against the references, whether the text differs from batch size 1's, padding shortfall."""

    agreement: dict[Cell, np.ndarray] = field(default_factory=dict)
    quality: dict[Cell, np.ndarray] = field(default_factory=dict)
    differs: dict[Cell, np.ndarray] = field(default_factory=dict)
    shorter: dict[Cell, np.ndarray] = field(default_factory=dict)


@dataclass
class Pool:
    """The generated prompt pool and where engines and generations live."""

    prompts: tuple[str, ...]
    references: tuple[str, ...]
    orders: list[tuple[int, ...]]
    work: Path
    cache: str | None


def engine_dir(pool: Pool, model: Model, r: int) -> Path:
    """The model's engine for round ``r`` (drift seeded per round), built once."""
    from harness.engines.emulator.build import build_engine

    drift = Drift(rate=model.drift, seed=r) if model.drift else None
    recipe = json.dumps(
        [
            model.fault.as_dict() if model.fault else None,
            drift.as_dict() if drift else None,
            model.limits.__dict__,
        ],
        sort_keys=True,
    )
    path = confine.inside(
        pool.work, pool.work / f"{model.name}-{hashlib.sha256(recipe.encode()).hexdigest()[:10]}"
    )
    if not (path / "config.json").is_file():
        build_engine(path, model.limits, fault=model.fault, drift=drift)
    return path


def jobs(
    pool: Pool, chosen: Sequence[Model], everything: Sequence[Model], s: Settings
) -> list[tuple[str, int, Job]]:
    """Batch size 1 and the healthy cells (one job), then every other model's rounds; twins
    that a chosen model borrows from are generated too."""
    names = {m.name for m in chosen} | {m.twin for m in chosen if m.extra or m.target == Target.PARTIAL}
    needed = [m for m in everything if m.name in names]
    healthy = next(m for m in everything if m.name == "healthy")
    healthy_cells = tuple(
        sorted(
            {
                c
                for m in needed
                if m.twin == "healthy"
                for c in m.extra + (m.cells if m.target == Target.PARTIAL else ())
            }
            | set(healthy.cells),
            key=lambda c: (c.beam_width, c.batch_size),
        )
    )
    # batch size 1 at every width a cell is generated at (the healthy engine's own included)
    widths = sorted(
        {c.beam_width for m in needed for c in m.cells + m.extra} | {c.beam_width for c in healthy_cells}
    )
    first = Job(
        str(engine_dir(pool, healthy, 0)),
        tuple(Cell(1, w) for w in widths) + healthy_cells,
        pool.prompts,
        pool.orders[0],
        s.max_new_tokens,
        pool.cache,
    )
    jobs = [("healthy", 0, first)]
    for m in needed:
        if m.name == "healthy":
            continue
        cells = m.cells + tuple(
            c
            for m2 in needed
            if m2.twin == m.name
            for c in m2.extra + (m2.cells if m2.target == Target.PARTIAL else ())
            if c not in m.cells
        )
        for r in range(m.rounds):
            jobs.append(
                (
                    m.name,
                    r,
                    Job(
                        str(engine_dir(pool, m, r)),
                        cells,
                        pool.prompts,
                        pool.orders[r],
                        s.max_new_tokens,
                        pool.cache,
                    ),
                )
            )
    return jobs


def observe(
    runs: Sequence[tuple[int, dict[Cell, list[list[str]]]]],
    pool: Pool,
    bs1: dict[int, list[str]],
    lengths: Sequence[int],
) -> Observations:
    from harness.verdict.scoring import rouge_l

    obs = Observations()
    cells = {c for _, out in runs for c in out if c.batch_size > 1}
    for cell in cells:
        rows = [(r, out[cell]) for r, out in runs if cell in out]
        base = bs1[cell.beam_width]
        obs.agreement[cell] = np.asarray([[rouge_l(base, row) for row in texts] for _, texts in rows])
        obs.quality[cell] = np.asarray(
            [[rouge_l(pool.references, row) for row in texts] for _, texts in rows]
        )
        obs.differs[cell] = np.asarray(
            [[[float(t != b) for t, b in zip(row, base)] for row in texts] for _, texts in rows]
        )
        obs.shorter[cell] = np.asarray(
            [ring(pool.orders[r], (cell,)).shortfall(cell, lengths) for r, _ in rows]
        )
    return obs


def make_pool(s: Settings) -> Pool:
    from harness.bundled.synthetic import generate as synth
    from harness.inputs.data import build_prompt
    from harness.model.dataset import Document

    examples = synth(s.pool, POOL_SEED, prefix="cal")
    docs = [Document(id=e.id, text=e.text, summary=e.summary) for e in examples]
    work = s.work_dir or harness_cache_dir() / "calibrate"
    work.mkdir(parents=True, exist_ok=True)
    orders = [
        tuple(int(i) for i in np.random.default_rng([s.seed, r]).permutation(s.pool))
        for r in range(max(s.rounds, 1))
    ]
    return Pool(
        prompts=tuple(build_prompt(DEFAULT_PROMPT_TEMPLATE, d) for d in docs),
        references=tuple(e.summary for e in examples),
        orders=orders,
        work=work,
        cache=str(s.cache_dir) if s.cache_dir else None,
    )
