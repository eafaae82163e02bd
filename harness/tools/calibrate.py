"""``python -m harness calibrate``: measured false-alarm and detection rates of the gate.

For every fault model (harness/engines/emulator/faults.py), the healthy engine, benign drift
at several rates, every fault on top of 30% drift, and the beam-slot overflow of the incident,
an emulator engine is built and run over a pool of generated prompts: ``rounds`` rotation
rounds per cell, each with its own seeded shuffle (and drift seed), so every pool prompt sits
at every position in ``rounds`` different batches. A trial then draws ``prompts`` documents
from the pool and, for every position and prompt, one of the rounds; its scores go through
``harness.verdict.statistics.analyze`` and ``harness.verdict.signatures.match``, the same code
as a real run, with the same tolerance and alpha. The Holm family is sized as in a run of the
default grid (135 tests): the model's own tests plus, for the cells it does not run, tests that
come out clean (p = 1), which is exact for the healthy engine and conservative for detection.

Batch size 1 is generated once, by the healthy engine, and is the baseline of every model: no
fault model and no drift changes batch size 1 (tests/unit/engines/test_faults.py checks it), as
on real engines. For partial degradation the engine is built to hit every prompt at its
position; a trial hits each of its prompts with probability ``fraction`` (damaged output) or
not (the output of the same engine without the fault: healthy, or drifting).

The sweep models (graph-ladder, beam-buffer, each also on drift, and a drifting healthy
engine) run every batch size from 2 to ``--sweep-to`` (8) as ``--sweep`` does: each trial seats each
prompt at one position per size (the sweep's cost) and sizes the Holm family as the sweep's
(``sweep_family``); besides the positions, a trial checks the boundary: every beam width's
first failing batch size must be the true one.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from harness.config import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_BEAM_WIDTHS,
    DEFAULT_PROMPT_TEMPLATE,
    DecodingSettings,
    RunConfig,
    harness_cache_dir,
)
from harness.engines.emulator.build import BuildLimits
from harness.engines.emulator.drift import Drift
from harness.engines.emulator.faults import Fault, FaultKind
from harness.errors import ConfigError
from harness.model.cell import Cell
from harness.model.limits import EngineLimits
from harness.model.scores import CellScores, Levels
from harness.model.vocab import FindingKind, Layout, Rotation, Verdict, Word
from harness.plan import SPARSE_MIN, Plan
from harness.stages.analyse import harm
from harness.storage import confine
from harness.verdict.signatures import CellEvidence, match, shortfall
from harness.verdict.statistics import analyze

POOL_SEED = 20261130  # the prompt pool is fixed; --seed drives rounds and trials
DRIFT_UNDER = 0.3  # the drift every fault model is also calibrated on top of
DRIFT_RATES = (0.1, 0.3, 0.6)


class Target(Word):
    """What calibrate expects of a model."""

    DETECT = "detect"  # fail exactly the damaged positions, naming the signature
    PASS = "pass"  # never fail (healthy, benign drift)
    PARTIAL = "partial"  # fail the position a share of prompts is damaged at
    UNIFORM = "uniform"  # fail: damage at every position alike


@dataclass(frozen=True)
class Model:
    """One engine under calibration: how it is built, which cells it runs, what is true."""

    name: str
    label: str
    fault: Fault | None
    cells: tuple[Cell, ...]
    damaged: dict[Cell, frozenset[int]]  # the truly damaged positions per cell
    pattern: FindingKind | None  # the signature harness.verdict.signatures should name
    drift: float = 0.0  # benign drift rate built in (0: none)
    limits: BuildLimits = field(default_factory=BuildLimits)
    rounds: int = 1
    extra: tuple[Cell, ...] = ()  # cells borrowed from the undamaged twin (untouched by the fault)
    twin: str = "healthy"  # the same engine without the fault: partial's unhit prompts, extras
    target: Target = Target.DETECT
    sweep: bool = False  # a --sweep to limits.max_batch_size (sparse rotation, its family)

    @property
    def should_fail(self) -> bool:
        return any(self.damaged.values())

    def boundary(self, beam_width: int) -> int | None:
        """The first damaged batch size of a beam width (None: every size passes)."""
        return min(
            (c.batch_size for c, d in self.damaged.items() if c.beam_width == beam_width and d), default=None
        )


def _all(b: int) -> frozenset[int]:
    return frozenset(range(b))


def _drifting(m: Model, twin: str) -> Model:
    """``m`` built on an engine that also drifts at DRIFT_UNDER."""
    return replace(
        m,
        name=f"{m.name}+drift",
        label=f"{m.label} + {DRIFT_UNDER:.0%} drift",
        drift=DRIFT_UNDER,
        rounds=1,
        twin=twin,
    )


SWEEP_TO = 8  # the sweep models' max_batch_size (--sweep-to)


def _sweep(
    name: str,
    label: str,
    fault: Fault | None,
    beam_width: int,
    damaged: dict[int, frozenset[int]],
    pattern: FindingKind | None,
    limits: BuildLimits,
    drift: float = 0.0,
) -> Model:
    """A --sweep of every batch size 2..max_batch_size at one beam width; ``damaged`` by batch
    size (sizes not given are undamaged)."""
    cells = tuple(Cell(b, beam_width) for b in range(2, limits.max_batch_size + 1))
    return Model(
        name,
        label,
        fault,
        cells,
        {c: damaged.get(c.batch_size, frozenset()) for c in cells},
        pattern,
        drift=drift,
        limits=limits,
        sweep=True,
        target=Target.DETECT if damaged else Target.PASS,
    )


def ladder_damage(size: int) -> frozenset[int]:
    """Graph ladder (faults.py's table): a size off the powers of two runs in the graph of the
    next one up, and its entries from the power of two below it on are damaged."""
    below = 1
    while below * 2 < size:
        below *= 2
    return frozenset() if size == below * 2 else frozenset(range(below, size))


def buffer_damage(size: int, width: int, slots: int) -> frozenset[int]:
    """Beam buffer (faults.py's table): the entries whose last beam slot lies past ``slots``."""
    return frozenset(p for p in range(size) if (p + 1) * width > slots)


def sweep_models(to: int = SWEEP_TO) -> tuple[Model, ...]:
    """The threshold faults under --sweep to ``to``, each alone and on 30% drift, and a
    drifting healthy engine swept."""
    sizes = range(2, to + 1)
    ladder = _sweep(
        "graph-ladder",
        f"graph ladder (sweep 1-{to})",
        Fault(FaultKind.GRAPH_LADDER),
        1,
        {b: ladder_damage(b) for b in sizes},
        FindingKind.GRAPH_LADDER,
        BuildLimits(max_batch_size=to, max_beam_width=1),
    )
    buffer = _sweep(
        "beam-buffer",
        f"beam buffer, beam 2 (sweep 1-{to})",
        Fault(FaultKind.BEAM_BUFFER),
        2,
        {b: buffer_damage(b, 2, to) for b in sizes},
        FindingKind.BEAM_BUFFER,
        BuildLimits(max_batch_size=to, max_beam_width=2),
    )
    drifting = _sweep(
        f"sweep-drift-{DRIFT_UNDER:g}",
        f"benign drift {DRIFT_UNDER:.0%} (sweep 1-{to})",
        None,
        1,
        {},
        None,
        BuildLimits(max_batch_size=to, max_beam_width=1),
        drift=DRIFT_UNDER,
    )
    under = f"drift-{DRIFT_UNDER:g}"
    return ladder, buffer, _drifting(ladder, under), _drifting(buffer, under), drifting


def models(rounds: int, fraction: float, position: int, sweep_to: int = SWEEP_TO) -> tuple[Model, ...]:
    """The engines calibrate runs, with their cells and the damage each must show."""
    c81, c41, c82, c42, c44 = Cell(8, 1), Cell(4, 1), Cell(8, 2), Cell(4, 2), Cell(4, 4)
    drifts = tuple(
        Model(
            f"drift-{r:g}",
            f"benign drift {r:.0%}",
            None,
            (c81, c42),
            {c81: frozenset(), c42: frozenset()},
            None,
            drift=r,
            rounds=rounds,
            target=Target.PASS,
        )
        for r in DRIFT_RATES
    )
    faults = (
        Model(
            "overflow",
            "beam-slot overflow (8x1 slots)",
            None,
            (c82, c44),
            {c82: frozenset(range(4, 8)), c44: frozenset({2, 3})},
            FindingKind.OVERFLOW,
            limits=BuildLimits(max_beam_width=1),
        ),
        Model(
            "full-batch",
            "full-batch corruption",
            Fault(FaultKind.FULL_BATCH),
            (c81, c41),
            {c81: frozenset({7}), c41: frozenset()},
            FindingKind.FULL_BATCH,
        ),
        Model(
            "padding",
            "padding bug",
            Fault(FaultKind.PADDING),
            (c81,),
            {c81: _all(8)},
            FindingKind.PADDING,
            rounds=rounds,
        ),
        Model(
            "stride",
            "uneven-finish stride",
            Fault(FaultKind.STRIDE),
            (c82,),
            {c82: frozenset(range(1, 8)), c81: frozenset()},
            FindingKind.STRIDE,
            rounds=rounds,
            extra=(c81,),
        ),
    )
    partial = Model(
        "partial",
        f"partial ({fraction:.0%} at position {position})",
        Fault(FaultKind.PARTIAL, position=position, fraction=1.0),
        (c81,),
        {c81: frozenset({position})},
        FindingKind.PARTIAL,
        target=Target.PARTIAL,
    )
    uniform = Model(
        "truncate",
        "uniform damage (cut short)",
        Fault(FaultKind.TRUNCATE),
        (c81, c42),
        {c81: _all(8), c42: _all(4)},
        FindingKind.ALL_POSITIONS,
        target=Target.UNIFORM,
    )
    healthy = Model(
        "healthy", "healthy", None, (c81, c82), {c81: frozenset(), c82: frozenset()}, None, target=Target.PASS
    )
    under = f"drift-{DRIFT_UNDER:g}"
    return (
        healthy,
        *drifts,
        *faults,
        *(_drifting(m, under) for m in faults),
        partial,
        _drifting(partial, under),
        uniform,
        *sweep_models(sweep_to),
    )


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


def _ring(order: Sequence[int], cells: Sequence[Cell]) -> Plan:
    """The full rotation of ``cells`` over the pool in ``order``, as a run plans it."""
    return Plan(cells=tuple(cells), reference_cells=(), order=tuple(order), seed=0)


def _generate(job: Job) -> dict[Cell, list[list[str]]]:
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
        engine_fingerprint(engine.info, code=engine_code(engine)),
    )
    plan = _ring(job.order, job.cells)
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


@dataclass(frozen=True)
class Outcome:
    """One model's rates over all trials, and what its engine did to the outputs."""

    model: Model
    trials: int
    flagged: int
    exact: int
    named: int
    wrong: int = 0  # trials in which a finding named another signature than the model's
    boundary: int = 0  # trials in which every beam width's first failing size was the true one
    differing: dict[Cell, float] = field(default_factory=dict)  # share unlike batch size 1
    quality_delta: dict[Cell, float] = field(default_factory=dict)  # vs batch size 1, pool mean

    @property
    def flagged_rate(self) -> float:
        return self.flagged / self.trials

    @property
    def exact_rate(self) -> float:
        return self.exact / self.trials

    @property
    def named_rate(self) -> float:
        return self.named / self.trials

    @property
    def boundary_rate(self) -> float:
        return self.boundary / self.trials


@dataclass(frozen=True)
class Targets:
    """The issue's targets (defaults)."""

    false_alarm: float = 0.01
    detection: float = 0.99
    exact: float = 0.95
    partial_detection: float = 0.95
    boundary: float = 0.95  # sweeps: the first failing batch size found exactly

    def check(self, o: Outcome) -> tuple[bool, str]:
        ok, said = self._check(o)
        if o.wrong:
            return False, f"{said}, no cause named wrong ({o.wrong} trials named one)"
        return ok, said

    def _check(self, o: Outcome) -> tuple[bool, str]:
        target = o.model.target
        if target == Target.PASS:
            ok = o.flagged_rate <= self.false_alarm
            if o.model.sweep:
                return (
                    ok and o.boundary_rate >= self.boundary,
                    f"flagged <= {self.false_alarm:.0%}, no boundary >= {self.boundary:.0%}",
                )
            return ok, f"flagged <= {self.false_alarm:.0%}"
        if target == Target.PARTIAL:
            if o.model.drift:
                return True, "reported (no target with drift)"
            return (o.flagged_rate >= self.partial_detection, f"detected >= {self.partial_detection:.0%}")
        if target == Target.UNIFORM:
            return o.flagged_rate >= self.detection, f"detected >= {self.detection:.0%}"
        ok = o.flagged_rate >= self.detection and o.exact_rate >= self.exact
        said = f"detected >= {self.detection:.0%}, exact >= {self.exact:.0%}"
        if o.model.sweep:
            return (ok and o.boundary_rate >= self.boundary, f"{said}, boundary >= {self.boundary:.0%}")
        return ok, said


@dataclass(frozen=True)
class Settings:
    """What ``calibrate`` was asked for."""

    trials: int = 200
    seed: int = RunConfig.seed
    prompts: int = 64
    pool: int = 96
    rounds: int = 1
    max_new_tokens: int = RunConfig.max_new_tokens
    tolerance: float = RunConfig.tolerance
    alpha: float = RunConfig.alpha
    fraction: float = 0.3
    position: int = 3
    jobs: int = 2
    cache_dir: Path | None = None
    work_dir: Path | None = None
    only: tuple[str, ...] = ()
    rotation: Rotation = RunConfig.rotation
    family: int = 0  # Holm family size; 0: the default grid's (see default_family)
    sweep_to: int = SWEEP_TO  # the sweep models' max_batch_size


def _family(sizes: Sequence[int], widths: int) -> int:
    """Tests in a run of these batch sizes at ``widths`` beam widths: three per position of
    every cell with batch size > 1 (position dependence, batch-size quality, changed outputs)
    and one omnibus per such cell."""
    tested = [b for b in sizes if b > 1]
    return (3 * sum(tested) + len(tested)) * widths


def default_family() -> int:
    """Tests in a run of the default grid (135 for batch sizes 1,2,4,8, beam widths 1,2,4)."""
    return _family(DEFAULT_BATCH_SIZES, len(DEFAULT_BEAM_WIDTHS))


def sweep_family(model: Model) -> int:
    """Tests in a --sweep to the model's max_batch_size at every default beam width its engine
    runs."""
    return _family(
        range(1, model.limits.max_batch_size + 1),
        sum(w <= model.limits.max_beam_width for w in DEFAULT_BEAM_WIDTHS),
    )


def _model_key(name: str) -> int:
    """A stable number per model, so ``--only`` does not change a model's trials."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def _pick(arr: np.ndarray, rounds: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    picked: np.ndarray = arr[rounds, rows, cols]
    return picked


def _trial_cell(
    cell: Cell,
    own: Observations,
    twin: Observations,
    rng: np.random.Generator,
    subset: np.ndarray,
    hits: np.ndarray | None,
    position: int,
    sparse: bool,
) -> tuple[CellScores, np.ndarray]:
    """One cell's scores in one trial: a round per position and prompt, partial hits mixed in
    from the undamaged twin, and (sparse) each prompt kept at one position only."""
    arr = own.agreement[cell]
    prompts = len(subset)
    rounds = rng.integers(arr.shape[0], size=(cell.batch_size, prompts))
    cols = np.broadcast_to(subset, rounds.shape)
    rows = np.arange(cell.batch_size)[:, None]
    picked = [_pick(getattr(own, k)[cell], rounds, rows, cols) for k in ("agreement", "quality", "differs")]
    if hits is not None:
        keep = np.zeros(rounds.shape, dtype=bool)
        keep[position] = hits
        twin_rounds = rng.integers(twin.agreement[cell].shape[0], size=rounds.shape)
        picked = [
            np.where(keep, p, _pick(getattr(twin, k)[cell], twin_rounds, rows, cols))
            for p, k in zip(picked, ("agreement", "quality", "differs"))
        ]
    if sparse and cell.batch_size > 1:
        ring = rng.permutation(prompts)
        seat = np.empty(prompts, dtype=np.int64)
        seat[ring] = np.arange(prompts) % cell.batch_size
        picked = [np.where(rows == seat[None, :], p, np.nan) for p in picked]
    as_rows = [tuple(tuple(map(float, r)) for r in p) for p in picked]
    scores = CellScores(baseline=as_rows[0], reference=as_rows[1], differs=as_rows[2])
    return scores, own.shorter[cell][rounds, rows, cols]


@dataclass(frozen=True)
class TrialResult:
    """What one trial found against what is true of the model."""

    flagged: bool  # the model's cells fail
    exact: bool  # every cell's degraded positions are exactly the damaged ones
    named: bool  # a finding names the model's signature
    wrong: bool  # a finding names another cause
    boundary: bool  # every beam width's first failing batch size is the true one


def trial(
    model: Model,
    obs: Observations,
    twin: Observations,
    levels: dict[int, BatchSizeOne],
    rng: np.random.Generator,
    s: Settings,
) -> TrialResult:
    """One trial of a model: its cells' scores through the run's analysis and signatures."""
    subset = np.sort(rng.choice(s.pool, size=s.prompts, replace=False))
    hits = rng.random(s.prompts) < s.fraction if model.target == Target.PARTIAL else None
    scores: dict[Cell, CellScores] = {}
    shorter = {}
    for cell in model.cells + model.extra:
        own = obs if cell in model.cells else twin
        scores[cell], shorter[cell] = _trial_cell(
            cell,
            own,
            twin,
            rng,
            subset,
            hits if cell in model.cells else None,
            s.position,
            s.rotation == Rotation.SPARSE or model.sweep,
        )
    level = {
        w: Levels(
            agreement=tuple(float(x) for x in lv.agreement[subset]),
            quality=tuple(float(x) for x in lv.quality[subset]),
        )
        for w, lv in levels.items()
    }
    analyses = analyze(
        scores,
        level,
        tolerance=s.tolerance,
        alpha=s.alpha,
        family=s.family or (sweep_family(model) if model.sweep else default_family()),
    )
    flagged = any(a.verdict == Verdict.FAIL for a in analyses)
    exact = all(
        set(a.degraded_positions) == set(model.damaged.get(a.cell, frozenset()))
        and (a.verdict == Verdict.FAIL) == bool(model.damaged.get(a.cell))
        for a in analyses
    )
    evidence = [
        CellEvidence(
            analysis=a,
            harm=harm(scores[a.cell], level[a.cell.beam_width]),
            shorter=tuple(tuple(int(x) for x in row) for row in shorter[a.cell]),
            changed=scores[a.cell].differs,
        )
        for a in analyses
    ]
    found = match(evidence, _limits(model))
    named = model.pattern is not None and any(f.kind == model.pattern for f in found.values())
    # spread names no cause: it says what was seen (damage over many positions, none alone)
    wrong = any(f.kind not in (model.pattern, FindingKind.SPREAD) for f in found.values())
    widths = sorted({c.beam_width for c in model.cells})
    first = {
        w: min(
            (a.cell.batch_size for a in analyses if a.cell.beam_width == w and a.verdict == Verdict.FAIL),
            default=None,
        )
        for w in widths
    }
    boundary = all(first[w] == model.boundary(w) for w in widths)
    return TrialResult(flagged, exact, named, wrong, boundary)


def _limits(model: Model) -> EngineLimits:
    lim = model.limits
    return EngineLimits(
        layout=Layout.UNIFIED,
        max_batch_size=lim.max_batch_size,
        max_beam_width=lim.max_beam_width,
        max_input_len=lim.max_input_len,
        max_seq_len=lim.max_seq_len,
    )


@dataclass
class _Pool:
    """The generated prompt pool and where engines and generations live."""

    prompts: tuple[str, ...]
    references: tuple[str, ...]
    orders: list[tuple[int, ...]]
    work: Path
    cache: str | None


def _engine_dir(pool: _Pool, model: Model, r: int) -> Path:
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


def _jobs(
    pool: _Pool, chosen: Sequence[Model], everything: Sequence[Model], s: Settings
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
        str(_engine_dir(pool, healthy, 0)),
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
                        str(_engine_dir(pool, m, r)),
                        cells,
                        pool.prompts,
                        pool.orders[r],
                        s.max_new_tokens,
                        pool.cache,
                    ),
                )
            )
    return jobs


def _observe(
    runs: Sequence[tuple[int, dict[Cell, list[list[str]]]]],
    pool: _Pool,
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
            [shortfall(_ring(pool.orders[r], (cell,)), cell, lengths) for r, _ in rows]
        )
    return obs


def _chosen(s: Settings) -> tuple[tuple[Model, ...], tuple[Model, ...]]:
    if s.prompts > s.pool:
        raise ConfigError(
            f"--prompts {s.prompts} exceeds --pool {s.pool}; a trial draws its prompts from the pool"
        )
    everything = models(s.rounds, s.fraction, s.position, s.sweep_to)
    unknown = set(s.only) - {m.name for m in everything}
    if unknown:
        raise ConfigError(
            f"--only {','.join(s.only)}: unknown model(s) {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(m.name for m in everything)}"
        )
    chosen = tuple(m for m in everything if m.name in s.only) if s.only else everything
    if any(m.sweep for m in chosen) and s.prompts < SPARSE_MIN * s.sweep_to:
        raise ConfigError(
            f"--sweep-to {s.sweep_to}: a sweep needs at least "
            f"{SPARSE_MIN * s.sweep_to} prompts ({SPARSE_MIN} per position of its "
            f"largest batch); give --prompts {SPARSE_MIN * s.sweep_to} (and a --pool "
            "at least as large), or leave the sweep models out with --only"
        )
    return chosen, everything


def _make_pool(s: Settings) -> _Pool:
    from harness.bundled.synthetic import generate as synth
    from harness.inputs.data import Document, build_prompt

    examples = synth(s.pool, POOL_SEED, prefix="cal")
    docs = [Document(id=e.id, text=e.text, summary=e.summary) for e in examples]
    work = s.work_dir or harness_cache_dir() / "calibrate"
    work.mkdir(parents=True, exist_ok=True)
    orders = [
        tuple(int(i) for i in np.random.default_rng([s.seed, r]).permutation(s.pool))
        for r in range(max(s.rounds, 1))
    ]
    return _Pool(
        prompts=tuple(build_prompt(DEFAULT_PROMPT_TEMPLATE, d) for d in docs),
        references=tuple(e.summary for e in examples),
        orders=orders,
        work=work,
        cache=str(s.cache_dir) if s.cache_dir else None,
    )


def _effects(
    obs: Observations, m: Model, levels: dict[int, BatchSizeOne]
) -> tuple[dict[Cell, float], dict[Cell, float]]:
    """Per cell of the model: the share of outputs unlike batch size 1's, and the pool's mean
    quality against the references minus batch size 1's."""
    differing = {c: float(obs.differs[c].mean()) for c in m.cells}
    delta = {c: float(obs.quality[c].mean() - levels[c.beam_width].quality.mean()) for c in m.cells}
    return differing, delta


def run_calibration(s: Settings, say: Callable[[str], None] = print) -> list[Outcome]:
    """Build, generate, score, then run the trials; returns one outcome per model."""
    from harness.engines.emulator.engine import EmulatorEngine
    from harness.verdict.scoring import rouge_l

    chosen, everything = _chosen(s)
    pool = _make_pool(s)
    jobs = _jobs(pool, chosen, everything, s)
    t0 = time.perf_counter()
    say(f"generating: {len(jobs)} rotation rounds over a pool of {s.pool} prompts on {s.jobs} worker(s) ...")
    if s.jobs > 1:
        with ProcessPoolExecutor(max_workers=s.jobs) as workers:
            results = list(workers.map(_generate, [j for _, _, j in jobs]))
    else:
        results = [_generate(j) for _, _, j in jobs]
    say(f"generated in {time.perf_counter() - t0:.0f} s")
    lengths = EmulatorEngine(jobs[0][2].engine_dir).count_tokens(list(pool.prompts))
    bs1 = {c.beam_width: texts[0] for c, texts in results[0].items() if c.batch_size == 1}
    levels = {
        w: BatchSizeOne(np.asarray(rouge_l(t, t)), np.asarray(rouge_l(pool.references, t)))
        for w, t in bs1.items()
    }
    observed = {
        name: _observe([(r, out) for (n, r, _), out in zip(jobs, results) if n == name], pool, bs1, lengths)
        for name in dict.fromkeys(n for n, _, _ in jobs)
    }
    outcomes = []
    for m in chosen:
        got = [
            trial(
                m,
                observed[m.name],
                observed.get(m.twin, observed["healthy"]),
                levels,
                np.random.default_rng([s.seed, _model_key(m.name), t]),
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
            )
        )
    return outcomes


def _cells_text(m: Model) -> str:
    """A model's cells as the table shows them: a sweep as its range of sizes."""
    if m.sweep:
        return ",".join(
            f"bs2-{m.limits.max_batch_size}-beam{w}" for w in sorted({c.beam_width for c in m.cells})
        )
    return ",".join(c.id for c in m.cells)


def table(outcomes: Sequence[Outcome], s: Settings, targets: Targets) -> tuple[list[str], bool]:
    """The printed table, what each engine did to its outputs, the varying-factors note and the
    one-line summary; and whether every target holds."""
    lines = [
        f"{'model':40} {'cells':16} {'expect':6} {'flagged':>8} {'exact':>7} {'named':>7} "
        f"{'wrong':>6} {'bound.':>7}  target"
    ]
    ok_all = True
    for o in outcomes:
        ok, target = targets.check(o)
        ok_all &= ok
        m = o.model
        exact = f"{o.exact_rate:7.1%}" if m.target == Target.DETECT else f"{'-':>7}"
        named = f"{o.named_rate:7.1%}" if m.pattern else f"{'-':>7}"
        bound = f"{o.boundary_rate:7.1%}" if m.sweep else f"{'-':>7}"
        lines.append(
            f"{m.label:40} {_cells_text(m):16} "
            f"{'fail' if m.should_fail else 'pass':6} {o.flagged_rate:8.1%} {exact} "
            f"{named} {o.wrong / o.trials:6.1%} {bound}  {target}: "
            f"{'ok' if ok else 'MISSED'}"
        )
    lines += [
        "",
        "what each engine did to its outputs (pool of "
        f"{s.pool}): share unlike batch size 1's; mean quality against the references "
        "minus batch size 1's",
    ]
    for o in outcomes:
        lines.append(
            f"  {o.model.label:38} "
            + "; ".join(
                f"{c.id} {o.differing[c]:.0%} differ, quality {o.quality_delta[c]:+.4f}"
                for c in o.model.cells
            )
        )
    lines += ["", _note(s)]
    lines.append(_summary(outcomes, s, ok_all))
    return lines, ok_all


def _note(s: Settings) -> str:
    rounds = (
        f"for every position and prompt, one of the model's rotation rounds (own shuffle "
        f"and drift seed; {s.rounds} for benign drift, padding and stride, 1 otherwise)"
        if s.rounds > 1
        else "one rotation round per model (own shuffle and drift seed)"
    )
    return (
        f"each trial: {s.prompts} prompts drawn from a pool of {s.pool} generated ones; "
        f"{rounds}; for partial, which prompts are hit at position {s.position} (each with "
        f"probability {s.fraction:.0%}). Holm family of {s.family or default_family()} tests "
        f"(the default grid's; tests outside the model's cells count as clean). tolerance "
        f"{s.tolerance}, alpha {s.alpha}, max_new_tokens {s.max_new_tokens}, seed {s.seed}, "
        f"{s.rotation} rotation"
        + (" (each prompt at one position per cell)" if s.rotation == Rotation.SPARSE else "")
        + f". Sweep models (bs2-{s.sweep_to}): every batch size 2..{s.sweep_to} at the sweep's "
        "cost (sparse rotation: each prompt at one position per size) with the sweep's Holm "
        "family (every default beam width the engine runs). flagged = the model's grid "
        "fails; exact = every cell's degraded positions are exactly the damaged ones; named "
        "= the failure names the right signature; wrong = a finding names another (a target "
        "on every model: none); bound. = every beam width's first failing batch size is the "
        "true one (none for a healthy engine)."
    )


def _summary(outcomes: Sequence[Outcome], s: Settings, ok_all: bool) -> str:
    healthy = [o for o in outcomes if o.model.target == Target.PASS]
    faults = [
        o
        for o in outcomes
        if o.model.should_fail and not (o.model.target == Target.PARTIAL and o.model.drift)
    ]
    fa = ", ".join(f"{o.flagged_rate:.1%} {o.model.name}" for o in healthy) or "n/a"
    summary = f"calibrate: false alarms {fa}"
    worst = min(faults, key=lambda o: o.flagged_rate, default=None)
    if worst is not None:
        summary += f"; worst detection {worst.flagged_rate:.1%} ({worst.model.name})"
    worst_exact = min(
        (o for o in faults if o.model.target == Target.DETECT), key=lambda o: o.exact_rate, default=None
    )
    if worst_exact is not None:
        summary += f"; worst exact localization {worst_exact.exact_rate:.1%} ({worst_exact.model.name})"
    worst_boundary = min((o for o in outcomes if o.model.sweep), key=lambda o: o.boundary_rate, default=None)
    if worst_boundary is not None:
        summary += f"; worst sweep boundary {worst_boundary.boundary_rate:.1%} ({worst_boundary.model.name})"
    return summary + f"; {s.trials} trials; " + ("all targets met" if ok_all else "TARGETS MISSED")
