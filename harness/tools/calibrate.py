"""``python -m harness calibrate``: measured false-alarm and detection rates of the gate.

For every fault model (harness/engines/emulator/faults.py), plus the healthy engine and the
beam-slot overflow of the incident, an emulator engine is built and run over a pool of
generated prompts: ``rounds`` rotation rounds per cell, each with its own seeded shuffle
(and, for benign drift, its own drift seed), so every pool prompt sits at every position in
``rounds`` different batches. A trial then draws ``prompts`` documents from the pool and,
for every position and prompt, one of the rounds; its scores go through
``harness.verdict.statistics.analyze`` and ``harness.verdict.signatures.match``, the same code as a real run,
with the same tolerance and alpha. The Holm family is sized as in a run of the default grid
(51 tests): the model's own tests plus, for the cells it does not run, tests that come out
clean (p = 1), which is exact for the healthy engine and conservative for detection.

Batch size 1 is generated once, by the healthy engine, and is the baseline of every model:
no fault model changes batch size 1 (tests/unit/engines/test_faults.py checks it), as on real engines.
For partial degradation the engine is built to hit every prompt at its position; a trial
hits each of its prompts with probability ``fraction`` (damaged output) or not (healthy one).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from harness.config import DEFAULT_PROMPT_TEMPLATE, DecodingSettings, harness_cache_dir
from harness.engines.emulator.build import BuildLimits
from harness.engines.emulator.faults import Fault
from harness.plan import Cell, Plan
from harness.results import CellScores
from harness.verdict.signatures import CellEvidence, match, shortfall
from harness.verdict.statistics import analyze

POOL_SEED = 20261130  # the prompt pool is fixed; --seed drives rounds and trials


@dataclass(frozen=True)
class Model:
    """One engine under calibration: how it is built, which cells it runs, what is true."""

    name: str
    label: str
    fault: Fault | None
    cells: tuple[Cell, ...]
    damaged: dict[Cell, frozenset[int]]  # the truly damaged positions per cell
    pattern: str | None  # the signature harness.verdict.signatures should name
    limits: BuildLimits = field(default_factory=BuildLimits)
    rounds: int = 1
    extra: tuple[Cell, ...] = ()  # cells borrowed from the healthy engine (untouched by the fault)

    @property
    def should_fail(self) -> bool:
        return any(self.damaged.values())


def _all(b: int) -> frozenset[int]:
    return frozenset(range(b))


def models(rounds: int, fraction: float, position: int) -> tuple[Model, ...]:
    """The engines calibrate runs, with their cells and the damage each must show."""
    c81, c41, c82, c44 = Cell(8, 1), Cell(4, 1), Cell(8, 2), Cell(4, 4)
    return (
        Model("healthy", "healthy", None, (c81, c82), {c81: frozenset(), c82: frozenset()}, None),
        Model("drift", "benign drift", Fault("drift"), (c81, Cell(4, 2)),
              {c81: frozenset(), Cell(4, 2): frozenset()}, None, rounds=rounds),
        Model("overflow", "beam-slot overflow (8x1 slots)", None, (c82, c44),
              {c82: frozenset(range(4, 8)), c44: frozenset({2, 3})}, "overflow",
              limits=BuildLimits(max_beam_width=1)),
        Model("full-batch", "full-batch corruption", Fault("full-batch"), (c81, c41),
              {c81: frozenset({7}), c41: frozenset()}, "full-batch"),
        Model("padding", "padding bug", Fault("padding"), (c81,), {c81: _all(8)}, "padding",
              rounds=rounds),
        Model("stride", "uneven-finish stride", Fault("stride"), (c82,),
              {c82: frozenset(range(1, 8)), c81: frozenset()}, "stride", rounds=rounds,
              extra=(c81,)),
        Model("partial", f"partial ({fraction:.0%} at position {position})",
              Fault("partial", position=position, fraction=1.0), (c81,),
              {c81: frozenset({position})}, "partial"),
    )


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

    torch.set_num_threads(1)
    engine = EmulatorEngine(job.engine_dir)
    cache = GenerationCache(Path(job.cache_dir) if job.cache_dir else None,
                            engine_fingerprint(engine.info))
    plan = _ring(job.order, job.cells)
    out: dict[Cell, list[list[str]]] = {}
    for cell in job.cells:
        settings = DecodingSettings(max_new_tokens=job.max_new_tokens, beam_width=cell.beam_width,
                                    length_penalty=1.0)
        got = generate_cell(engine, cell, plan, job.prompts, settings, cache=cache)
        out[cell] = [list(row) for row in got.texts]  # type: ignore[arg-type]
    return out


@dataclass
class Observations:
    """Scores and padding shortfalls per cell: arrays [round, position, document]."""

    scores: dict[Cell, np.ndarray]
    shorter: dict[Cell, np.ndarray]


@dataclass(frozen=True)
class Outcome:
    """One model's rates over all trials."""

    model: Model
    trials: int
    flagged: int
    exact: int
    named: int

    @property
    def flagged_rate(self) -> float:
        return self.flagged / self.trials

    @property
    def exact_rate(self) -> float:
        return self.exact / self.trials

    @property
    def named_rate(self) -> float:
        return self.named / self.trials


@dataclass(frozen=True)
class Targets:
    """The issue's targets (defaults)."""

    false_alarm: float = 0.01
    detection: float = 0.99
    exact: float = 0.95
    partial_detection: float = 0.90

    def check(self, o: Outcome) -> tuple[bool, str]:
        if not o.model.should_fail:
            return o.flagged_rate <= self.false_alarm, f"flagged <= {self.false_alarm:.0%}"
        if o.model.name == "partial":
            return (o.flagged_rate >= self.partial_detection,
                    f"detected >= {self.partial_detection:.0%}")
        ok = o.flagged_rate >= self.detection and o.exact_rate >= self.exact
        return ok, f"detected >= {self.detection:.0%}, exact >= {self.exact:.0%}"


def trial(model: Model, obs: Observations, healthy: Observations | None,
          level_pool: dict[int, np.ndarray], rng: np.random.Generator,
          *, pool: int, prompts: int, fraction: float, position: int, tolerance: float,
          alpha: float, rotation: str = "full", family: int | None = None
          ) -> tuple[bool, bool, bool]:
    """One trial: (flagged, localized exactly, signature named)."""
    subset = np.sort(rng.choice(pool, size=prompts, replace=False))
    cells = model.cells + model.extra
    hits = None
    if model.name == "partial":  # each prompt hit with probability ``fraction``, as the fault does
        hits = rng.random(prompts) < fraction
    scores: list[CellScores] = []
    shorter: dict[Cell, np.ndarray] = {}
    for cell in cells:
        source = obs if cell in model.cells else healthy
        assert source is not None
        arr = source.scores[cell]
        rounds = rng.integers(arr.shape[0], size=(cell.batch_size, prompts))
        cols = np.broadcast_to(subset, rounds.shape)
        rows = np.arange(cell.batch_size)[:, None]
        picked = arr[rounds, rows, cols]
        if hits is not None and healthy is not None and cell in model.cells:
            base = healthy.scores[cell][0][rows, cols]
            keep = np.zeros_like(picked, dtype=bool)
            keep[position] = hits
            picked = np.where(keep, picked, base)
        shorter[cell] = source.shorter[cell][rounds, rows, cols]
        if rotation == "sparse" and cell.batch_size > 1:
            # each prompt at one position: its index in the trial's ring, modulo B
            ring = rng.permutation(prompts)
            seat = np.empty(prompts, dtype=np.int64)
            seat[ring] = np.arange(prompts) % cell.batch_size
            picked = np.where(rows == seat[None, :], picked, np.nan)
        zeros = tuple(tuple(0.0 for _ in range(prompts)) for _ in range(cell.batch_size))
        scores.append(CellScores(cell=cell, baseline=tuple(tuple(map(float, r)) for r in picked),
                                 reference=zeros))
    level = {w: [float(x) for x in level_pool[w][subset]] for w in {c.beam_width for c in cells}}
    analyses = analyze(scores, level, tolerance=tolerance, alpha=alpha, family=family)
    flagged = any(a.verdict == "fail" for a in analyses)
    exact = all(set(a.degraded_positions) == set(model.damaged.get(a.cell, frozenset()))
                and (a.verdict == "fail") == bool(model.damaged.get(a.cell))
                for a in analyses)
    evidence = [CellEvidence(analysis=a, drops=tuple(tuple(lv - x for lv, x in
                                                           zip(level[a.cell.beam_width], row))
                                                     for row in cs.baseline),
                             shorter=tuple(tuple(int(x) for x in row) for row in shorter[a.cell]))
                for a, cs in zip(analyses, scores)]
    limits = _limits(model)
    found = match(evidence, limits)
    named = model.pattern is not None and any(f.kind == model.pattern for f in found.values())
    return flagged, exact, named


def _limits(model: Model):
    from harness.limits.engine_config import EngineLimits

    lim = model.limits
    return EngineLimits(layout="unified", max_batch_size=lim.max_batch_size,
                        max_beam_width=lim.max_beam_width, max_input_len=lim.max_input_len,
                        max_seq_len=lim.max_seq_len)


@dataclass(frozen=True)
class Settings:
    """What ``calibrate`` was asked for."""

    trials: int = 200
    seed: int = 0
    prompts: int = 64
    pool: int = 128
    rounds: int = 2
    max_new_tokens: int = 64
    tolerance: float = 0.02
    alpha: float = 0.01
    fraction: float = 0.3
    position: int = 3
    jobs: int = 2
    cache_dir: Path | None = None
    work_dir: Path | None = None
    only: tuple[str, ...] = ()
    rotation: str = "full"
    family: int = 0  # Holm family size; 0: the default grid's (see default_family)


def default_family() -> int:
    """Tests in a run of the default grid: every position of every cell with batch size > 1,
    plus one omnibus test per such cell (51 for batch sizes 1,2,4,8 and beam widths 1,2,4)."""
    from harness.config import DEFAULT_BATCH_SIZES, DEFAULT_BEAM_WIDTHS

    sizes = [b for b in DEFAULT_BATCH_SIZES if b > 1]
    return (sum(sizes) + len(sizes)) * len(DEFAULT_BEAM_WIDTHS)


def _model_key(name: str) -> int:
    """A stable number per model, so ``--only`` does not change a model's trials."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def run_calibration(s: Settings, say: Callable[[str], None] = print) -> list[Outcome]:
    """Build, generate, score, then run the trials; returns one outcome per model."""
    from harness.bundled.synthetic import generate as synth
    from harness.engines.emulator.build import build_engine
    from harness.inputs.data import Document, build_prompt
    from harness.verdict.scoring import rouge_l

    if s.prompts > s.pool:
        from harness.errors import ConfigError

        raise ConfigError(f"--prompts {s.prompts} exceeds --pool {s.pool}; a trial draws its "
                          "prompts from the pool")
    chosen = models(s.rounds, s.fraction, s.position)
    unknown = set(s.only) - {m.name for m in chosen}
    if unknown:
        from harness.errors import ConfigError

        raise ConfigError(f"--only {','.join(s.only)}: unknown model(s) {', '.join(sorted(unknown))}; "
                          f"choose from {', '.join(m.name for m in chosen)}")
    if s.only:
        chosen = tuple(m for m in chosen if m.name in s.only)
    docs = [Document(id=e.id, text=e.text, summary=e.summary)
            for e in synth(s.pool, POOL_SEED, prefix="cal")]
    prompts = tuple(build_prompt(DEFAULT_PROMPT_TEMPLATE, d) for d in docs)
    work = s.work_dir or harness_cache_dir() / "calibrate"
    work.mkdir(parents=True, exist_ok=True)

    def engine_dir(model: Model, r: int) -> Path:
        fault = model.fault
        if fault is not None and fault.kind == "drift":
            fault = replace(fault, seed=r)
        # the folder says what was built, so changed parameters never reuse an old engine
        recipe = json.dumps([fault.as_dict() if fault else None, model.limits.__dict__],
                            sort_keys=True)
        path = work / f"{model.name}-{hashlib.sha256(recipe.encode()).hexdigest()[:10]}"
        if not (path / "config.json").is_file():
            build_engine(path, model.limits, fault=fault)
        return path

    healthy_dir = engine_dir(models(1, s.fraction, s.position)[0], 0)
    orders = [tuple(int(i) for i in np.random.default_rng([s.seed, r]).permutation(s.pool))
              for r in range(max(s.rounds, 1))]
    cache = str(s.cache_dir) if s.cache_dir else None
    baseline_cells = tuple(sorted({Cell(1, c.beam_width) for m in chosen
                                   for c in m.cells + m.extra}, key=lambda c: c.beam_width))
    healthy_cells = tuple(sorted({c for m in chosen for c in m.extra} |
                                 {c for m in chosen if m.name in ("healthy", "partial")
                                  for c in m.cells},
                                 key=lambda c: (c.beam_width, c.batch_size)))
    jobs: list[tuple[str, int, Job]] = [
        ("baseline", 0, Job(str(healthy_dir), baseline_cells + healthy_cells, prompts, orders[0],
                            s.max_new_tokens, cache))]
    for m in chosen:
        if m.name == "healthy":
            continue
        for r in range(m.rounds):
            jobs.append((m.name, r, Job(str(engine_dir(m, r)), m.cells, prompts, orders[r],
                                        s.max_new_tokens, cache)))
    t0 = time.perf_counter()
    say(f"generating: {len(jobs)} rotation rounds over a pool of {s.pool} prompts on "
        f"{s.jobs} worker(s) ...")
    if s.jobs > 1:
        with ProcessPoolExecutor(max_workers=s.jobs) as pool:
            results = list(pool.map(_generate, [j for _, _, j in jobs]))
    else:
        results = [_generate(j) for _, _, j in jobs]
    say(f"generated in {time.perf_counter() - t0:.0f} s")

    from harness.engines.emulator.engine import EmulatorEngine

    lengths = EmulatorEngine(healthy_dir).count_tokens(list(prompts))
    base_out = results[0]
    baseline = {c.beam_width: base_out[c][0] for c in baseline_cells}
    # batch size 1 against itself: 1.0 except where an output is empty (ROUGE-L 0)
    level = {w: np.asarray(rouge_l(texts, texts)) for w, texts in baseline.items()}

    def observe(per_round: list[tuple[int, dict[Cell, list[list[str]]]]], cells: Sequence[Cell]
                ) -> Observations:
        scores, shorter = {}, {}
        for cell in cells:
            arr, sh = [], []
            for r, out in per_round:
                arr.append([rouge_l(baseline[cell.beam_width], row) for row in out[cell]])
                sh.append(np.asarray(shortfall(_ring(orders[r], (cell,)), cell, lengths)))
            scores[cell] = np.asarray(arr, dtype=np.float64)
            shorter[cell] = np.asarray(sh)
        return Observations(scores, shorter)

    healthy = observe([(0, base_out)], healthy_cells)
    outcomes = []
    for m in chosen:
        if m.name == "healthy":
            obs = healthy
        else:
            runs = [(r, out) for (name, r, _), out in zip(jobs, results) if name == m.name]
            obs = observe(runs, m.cells)
        flagged = exact = named = 0
        for t in range(s.trials):
            rng = np.random.default_rng([s.seed, _model_key(m.name), t])
            f, e, n = trial(m, obs, healthy, level, rng, pool=s.pool, prompts=s.prompts,
                            fraction=s.fraction, position=s.position, tolerance=s.tolerance,
                            alpha=s.alpha, rotation=s.rotation,
                            family=s.family or default_family())
            flagged, exact, named = flagged + f, exact + e, named + n
        outcomes.append(Outcome(m, s.trials, flagged, exact, named))
    return outcomes


def table(outcomes: Sequence[Outcome], s: Settings, targets: Targets) -> tuple[list[str], bool]:
    """The printed table, the varying-factors note and the one-line summary; and whether
    every target holds."""
    lines = [f"{'model':34} {'cells':20} {'expect':6} {'flagged':>8} {'exact':>7} {'named':>7}  "
             f"target"]
    ok_all = True
    for o in outcomes:
        ok, target = targets.check(o)
        ok_all &= ok
        m = o.model
        cells = ",".join(c.id for c in m.cells)
        expect = "fail" if m.should_fail else "pass"
        exact = f"{o.exact_rate:7.1%}" if m.should_fail else f"{'-':>7}"
        named = f"{o.named_rate:7.1%}" if m.pattern else f"{'-':>7}"
        lines.append(f"{m.label:34} {cells:20} {expect:6} {o.flagged_rate:8.1%} {exact} {named}  "
                     f"{target}: {'ok' if ok else 'MISSED'}")
    lines.append("")
    lines.append(f"each trial: {s.prompts} prompts drawn from a pool of {s.pool} generated ones; "
                 f"for every position and prompt, one of {s.rounds} rotation rounds (own shuffle; "
                 f"own drift seed for benign drift); for partial, which prompts are hit at "
                 f"position {s.position} (each with probability {s.fraction:.0%}). Holm family of "
                 f"{s.family or default_family()} tests (the default grid's; tests outside the "
                 f"model's cells count as clean). tolerance {s.tolerance}, alpha {s.alpha}, "
                 f"max_new_tokens {s.max_new_tokens}, seed {s.seed}, {s.rotation} rotation"
                 + (" (each prompt at one position per cell)" if s.rotation == "sparse" else "")
                 + ". flagged = the model's grid "
                 "fails; exact = every cell's degraded positions are exactly the damaged ones; "
                 "named = the failure names the right signature.")
    healthy = [o for o in outcomes if not o.model.should_fail]
    faults = [o for o in outcomes if o.model.should_fail]
    fa = ", ".join(f"{o.flagged_rate:.1%} {o.model.name}" for o in healthy) or "n/a"
    worst = min(faults, key=lambda o: o.flagged_rate) if faults else None
    worst_exact = min((o for o in faults if o.model.name != "partial"),
                      key=lambda o: o.exact_rate, default=None)
    summary = f"calibrate: false alarms {fa}"
    if worst is not None:
        summary += f"; worst detection {worst.flagged_rate:.1%} ({worst.model.name})"
    if worst_exact is not None:
        summary += f"; worst exact localization {worst_exact.exact_rate:.1%} ({worst_exact.model.name})"
    summary += f"; {s.trials} trials; " + ("all targets met" if ok_all else "TARGETS MISSED")
    lines.append(summary)
    return lines, ok_all


def min_detectable_drop(n: int, sd: float, *, tolerance: float, alpha: float, tests: int,
                        power: float = 0.8) -> float:
    """Smallest true mean drop a position test detects with the given power, Bonferroni-bound
    (Holm is at least as powerful), for a paired-difference standard deviation ``sd``."""
    from scipy import stats

    t_a = stats.t.ppf(1 - alpha / tests, n - 1)
    t_b = stats.t.ppf(power, n - 1)
    return tolerance + (t_a + t_b) * sd / math.sqrt(n)
