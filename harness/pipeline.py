"""The whole run, one way: config -> preflight -> plan -> generate -> score -> analyse -> report.

``run(config)`` is what both the pytest plugin and ``python -m harness run`` call.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import __version__
from harness.config import RunConfig
from harness.engines.base import Engine, EngineInfo
from harness.engines.ranks import Ranks, current, require_world
from harness.engines.registry import adopt, load_engine, peek_config
from harness.engines.watchdog import BatchTimeoutEngine
from harness.errors import ConfigError, HarnessError
from harness.inputs.data import Dataset, load_dataset, select_subset
from harness.inputs.prompts import build_prompts
from harness.limits.engine_config import EngineLimits, read_limits
from harness.limits.preflight import LimitCheck, MemoryBudget, preflight
from harness.plan import Cell, Plan, cells_for, choose_batch_sizes, make_plan, shard_cells
from harness.storage.atomic import safe_name
from harness.storage.cache import GenerationCache, engine_fingerprint
from harness.storage.generations import GenerationsLog
from harness.storage.goldens import GoldenSet, GoldensStore
from harness.verdict.scoring import rouge_l
from harness.verdict.signatures import CellEvidence, Finding, match, shortfall
from harness.verdict.statistics import CellAnalysis, CellScores, analyze


@dataclass(frozen=True)
class CellResult:
    """Everything known about one cell under test."""

    cell: Cell
    checks: tuple[LimitCheck, ...]
    analysis: CellAnalysis | None
    error: str | None = None
    finding: Finding | None = None  # the known fault signature the damage matches, if any

    @property
    def verdict(self) -> str:
        if self.error:
            return "error"
        return self.analysis.verdict if self.analysis else "error"

    @property
    def limit_failures(self) -> tuple[LimitCheck, ...]:
        return tuple(c for c in self.checks if c.status == "fail")


@dataclass(frozen=True)
class Outputs:
    """Texts generated for one cell, indexed [position][document index]; once the cell is
    complete they live in generations.jsonl (``harness.storage.generations.SpilledTexts``)."""

    cell: Cell
    texts: Sequence[Sequence[str | None]]  # None: the prompt never sat there (sparse)
    # every beam of every output, [position][doc], beam search only; () once the cell is in
    # generations.jsonl, which keeps them
    beams: tuple[tuple[tuple[str, ...] | None, ...], ...] = ()


@dataclass(frozen=True)
class RunResult:
    """What a run produced; the report writers and the plugin read only this."""

    config: RunConfig
    engine: EngineInfo
    limits: EngineLimits | None
    dataset: Dataset
    plan: Plan
    baseline: dict[int, str]
    cells: tuple[CellResult, ...]
    outputs: tuple[Outputs, ...]
    started: str
    seconds: float
    memory: tuple[MemoryBudget, ...] = ()
    cache: dict[str, Any] = field(default_factory=dict)
    baseline_texts: dict[int, tuple[str, ...]] = field(default_factory=dict)
    goldens_paths: dict[int, str] = field(default_factory=dict)
    finished: str = ""
    goldens_written: tuple[str, ...] = ()
    report_dir: Path | None = None
    prompts: tuple[str, ...] = ()  # as sent to the engine, in dataset order
    ranks: Ranks = field(default_factory=Ranks)
    timing: dict[str, Any] = field(default_factory=dict)
    scores: tuple[CellScores, ...] = ()  # per-prompt scores, for shard reports and merge
    levels: dict[int, tuple[float, ...]] = field(default_factory=dict)  # batch size 1's, per beam
    grid: tuple[Cell, ...] = ()  # every cell of the unsharded grid (= plan.cells unless --shard)
    prompt_lengths: tuple[int, ...] = ()  # what the fault signatures measured padding in

    @property
    def verdict(self) -> str:
        bad = any(c.verdict != "pass" or c.limit_failures for c in self.cells)
        return "fail" if bad else "pass"


@dataclass(frozen=True)
class FollowerRun:
    """What a rank other than 0 did under MPI: it drove the engine through every batch rank 0
    ran, in the same order; it scores, asserts and writes nothing."""

    ranks: Ranks
    engine: EngineInfo
    batches: int
    sequences: int
    seconds: float
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        failed = f"; {len(self.errors)} cell(s) raised here too" if self.errors else ""
        return (f"{self.ranks.label}: drove the engine through {self.batches} batches "
                f"({self.sequences} sequences) in step with rank 0{failed}; rank 0 scores, "
                "asserts and writes the report")


Progress = Callable[[int], None]


@dataclass
class Timing:
    """Where a run's time goes; every figure in seconds (see docs/performance.md)."""

    engine_generate_s: float = 0.0  # wall time inside engine.generate, summed
    engine_calls: int = 0
    engine_load_s: float = 0.0  # loading the engine (and the golden engine) in prepare()
    prepare_s: float = 0.0  # prepare(): dataset, engine load, preflight, goldens check
    generate_stage_s: float = 0.0  # wall time of the generation loop (engine + cache + hand-off)
    scoring_s: float = 0.0  # ROUGE-L CPU time, summed over cells (overlapped or not)
    scoring_overlapped: bool = False
    after_generation_s: float = 0.0  # end of generation -> analysis done (what overlap shortens)
    harness_total_s: float = 0.0  # start of prepare() -> analysis done (report writing excluded)

    def as_dict(self) -> dict[str, Any]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in self.__dict__.items()}


def _check_writable(root: Path, option: str = "--report-dir", fix: str = "choose a writable folder"
                    ) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} {root}: cannot create ({exc.strerror}); {fix}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {root}: not writable; {fix}")


def _new_report_dir(root: Path, engine: EngineInfo, started: dt.datetime) -> Path:
    _check_writable(root)
    stem = f"run-{started:%Y%m%d-%H%M%S}-{safe_name(engine.backend.replace(':', '-').replace('.', '-'))}"
    for i in range(1000):
        path = root / (stem if i == 0 else f"{stem}-{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(f"--report-dir {root}: not writable ({exc.strerror}); "
                              "choose a writable folder") from None
    raise ConfigError(f"--report-dir {root}: too many runs started this second")


def _generate_cell(engine: Engine, cell: Cell, plan: Plan, prompts: list[str], config: RunConfig,
                   tick: Progress, cache: GenerationCache | None = None,
                   timing: Timing | None = None) -> Outputs:
    n = len(plan.order)
    # None where the plan puts no prompt at a position (--rotation sparse)
    texts: list[list[str | None]] = [[None] * n for _ in range(cell.batch_size)]
    # every beam of every output (beam search only): kept in generations.jsonl, not scored
    beams: list[list[tuple[str, ...] | None]] = [[None] * n for _ in range(cell.batch_size)]
    settings = config.decoding(cell.beam_width)
    for batch in plan.batches(cell):
        batch_prompts = [prompts[d] for d in batch.documents]
        entry = cache.get_entry(settings, batch_prompts) if cache else None
        outs, all_beams = entry if entry is not None else (None, None)
        if outs is None:
            t = time.perf_counter()
            gens = engine.generate(batch_prompts, settings)
            if timing is not None:
                timing.engine_generate_s += time.perf_counter() - t
                timing.engine_calls += 1
            listed = isinstance(gens, Sequence) and not isinstance(gens, str)
            if not listed or len(gens) != len(batch.documents):
                got = len(gens) if listed else type(gens).__name__
                raise RuntimeError(f"the engine returned {got} outputs for a batch of "
                                   f"{len(batch.documents)}; generate returns one Generation per prompt")
            outs = [_text(g) for g in gens]
            all_beams = None
            if cell.beam_width > 1:
                all_beams = [[_text(b) for b in (getattr(g, "beams", None) or (text,))]
                             for g, text in zip(gens, outs)]
            if cache:
                cache.put(settings, batch_prompts, outs, all_beams)
        for position, (doc, text) in enumerate(zip(batch.documents, outs)):
            texts[position][doc] = text
            if all_beams is not None:
                beams[position][doc] = tuple(all_beams[position])
        tick(len(batch.documents))
    kept = tuple(tuple(b) for b in beams) if cell.beam_width > 1 else ()
    return Outputs(cell=cell, texts=tuple(tuple(t) for t in texts), beams=kept)


def _text(generation: Any) -> str:
    """The text to score: "" for a missing one; lone surrogates (undecodable bytes) replaced,
    so that odd output is scored (low) and stored, never a crash."""
    text = getattr(generation, "text", generation)
    if not isinstance(text, str):
        return ""
    return text.encode("utf-8", "replace").decode("utf-8")


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def planned_batch_sizes(config: RunConfig) -> tuple[int, ...]:
    """Batch sizes from options and config.json alone (no engine load), so that test ids at
    collection and the cells of the run are the same."""
    if config.batch_sizes is not None:
        return config.batch_sizes
    limits = read_limits(peek_config(config.engine, config.backend))
    return choose_batch_sizes(config.batch_sizes, limits.max_batch_size if limits else None)


def planned_cells(config: RunConfig) -> list[Cell]:
    """The cells a run will test (for test ids): this shard's only, with --shard."""
    cells = cells_for(planned_batch_sizes(config), config.beam_widths)
    return list(shard_cells(cells, *config.shard) if config.shard else cells)


@dataclass(frozen=True)
class Prepared:
    """Everything known before the engine generates anything (the preflight stage)."""

    config: RunConfig
    dataset: Dataset
    engine: Engine
    limits: EngineLimits | None
    plan: Plan
    prompts: tuple[str, ...]
    checks: dict[Cell, tuple[LimitCheck, ...]]
    memory: tuple[MemoryBudget, ...]
    goldens: dict[int, GoldenSet]
    store: GoldensStore
    started: dt.datetime
    t0: float
    golden_engine: Engine | None = None
    cache: GenerationCache | None = None
    prompt_lengths: tuple[int, ...] | None = None  # tokens, from the engine's tokenizer
    ranks: Ranks = field(default_factory=Ranks)
    timing: Timing = field(default_factory=Timing)
    grid: tuple[Cell, ...] = ()  # every cell of the unsharded grid

    def limit_failures(self) -> list[LimitCheck]:
        return [c for checks in self.checks.values() for c in checks if c.status == "fail"]


def prepare(config: RunConfig, *, engine: Engine | None = None) -> Prepared:
    """Load dataset and engine, plan the cells, check limits and goldens; generate nothing."""
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.perf_counter()
    dataset = load_dataset(config.dataset, text_field=config.text_field,
                           summary_field=config.summary_field, config=config.dataset_config,
                           split=config.split)
    if config.num_prompts is not None:
        dataset = select_subset(dataset, config.num_prompts, config.seed)
    given = engine is not None
    ranks = current()
    if not given:  # one process per engine rank: checked before a multi-GPU engine loads
        peeked = read_limits(peek_config(config.engine, config.backend))
        if peeked is not None:
            require_world(ranks, peeked.tp_size, peeked.pp_size, engine=config.engine)
    timing = Timing()
    t_load = time.perf_counter()
    engine = adopt(engine) if engine is not None else load_engine(
        config.engine, config.backend, options=config.engine_options())
    timing.engine_load_s = time.perf_counter() - t_load
    limits = read_limits(engine.info.config, str(Path(engine.info.path) / "config.json"))
    require_world(ranks, limits.tp_size if limits else None, limits.pp_size if limits else None,
                  engine=config.engine if not given else engine.info.path)
    # test ids were made from config.json alone (planned_batch_sizes); an engine handed in
    # directly has no test ids to agree with, so its own limits cap the grid
    sizes = (choose_batch_sizes(config.batch_sizes, limits.max_batch_size if limits else None)
             if given else planned_batch_sizes(config))
    plan = make_plan(sizes, config.beam_widths, len(dataset), config.seed, config.rotation)
    prompts = build_prompts(dataset.documents, config.prompt_template, chat=config.chat,
                            engine=engine)

    counted = engine.count_tokens(list(prompts))
    lengths = tuple(counted) if counted is not None else None
    # preflight covers the whole grid, so every shard's report carries the same checks and budgets
    checked = preflight(plan.cells, limits, engine_dir=engine.info.path,
                      prompt_lengths=list(lengths) if lengths is not None else None,
                      max_new_tokens=config.max_new_tokens, gpu_option=config.gpu_memory)
    grid = plan.cells
    if config.shard:
        plan = plan.shard(*config.shard)

    _check_writable(config.report_dir)
    if config.update_goldens:
        _check_writable(config.goldens_dir, "--goldens-dir", "choose a writable folder for the "
                        "goldens, or drop --update-goldens")
    store = GoldensStore(config.goldens_dir)
    goldens: dict[int, GoldenSet] = {}
    if not config.update_goldens:
        for w in config.beam_widths:
            found = store.load(engine.info.identity, dataset, config.decoding(w))
            if found is not None:
                goldens[w] = found
    t_load = time.perf_counter()
    golden_engine = (load_engine(config.golden_engine, None, config.engine_options())
                     if config.golden_engine and ranks.is_root else None)
    timing.engine_load_s += time.perf_counter() - t_load
    if config.no_cache:
        cache = GenerationCache(None, None, "off (--no-cache)")
    elif ranks.world > 1:  # a rank that skipped a cached batch would leave the others waiting
        cache = GenerationCache(None, None, f"off (MPI world of {ranks.world}: every rank "
                                            "generates every batch)")
    else:
        fingerprint = engine_fingerprint(engine.info)
        if fingerprint:
            _check_writable(config.cache_dir, "--cache-dir", "choose a writable folder, or run "
                            "with --no-cache")
        cache = GenerationCache(config.cache_dir, fingerprint, "" if fingerprint else (
            "off (a server's answers are not cached)" if engine.info.backend == "openai"
            else "off (the engine has no directory to fingerprint)"))
    if config.batch_timeout is not None:
        engine = BatchTimeoutEngine(engine, config.batch_timeout)
        if golden_engine is not None:
            golden_engine = BatchTimeoutEngine(golden_engine, config.batch_timeout)
    timing.prepare_s = time.perf_counter() - t0
    return Prepared(config=config, dataset=dataset, engine=engine, limits=limits, plan=plan,
                    prompts=prompts, checks=checked.checks, memory=checked.memory,
                    goldens=goldens, store=store,
                    started=started, t0=t0, golden_engine=golden_engine, cache=cache,
                    prompt_lengths=lengths, ranks=ranks, timing=timing, grid=grid)


def run(config: RunConfig, *, progress: Callable[[int], Progress] | None = None,
        engine: Engine | None = None) -> RunResult | FollowerRun:
    """Run the pipeline once and write the report; raises HarnessError for bad input.
    Under MPI, ranks other than 0 return a FollowerRun (see ``execute``)."""
    return execute(prepare(config, engine=engine), progress=progress)


def follow(prep: Prepared, progress: Callable[[int], Progress] | None = None) -> FollowerRun:
    """A rank other than 0: the same generate calls as rank 0, nothing scored or written."""
    try:
        _, errors = _generate_all(prep, progress)
    finally:
        close = getattr(prep.engine, "close", None)
        if callable(close):
            close()
    return FollowerRun(ranks=prep.ranks, engine=prep.engine.info,
                       batches=sum(len(prep.plan.batches(c)) for c in prep.plan.all_cells),
                       sequences=prep.plan.sequences(), seconds=time.perf_counter() - prep.t0,
                       errors={c.id: e for c, e in errors.items()})


def execute(prep: Prepared, *, progress: Callable[[int], Progress] | None = None,
            overlap: bool = True) -> RunResult | FollowerRun:
    """Generate every planned batch, score, analyse and write the report (rank 0); other
    ranks only generate, in step (``follow``).

    With ``overlap`` each cell is scored in a worker thread as soon as it and its baseline
    exist, while the engine generates the next cells; the scores are the same as scoring
    afterwards (same function, same texts). The analysis waits for every cell (Holm's
    correction spans all tests). Runs that record goldens score afterwards: their baseline
    exists only once the run is complete.
    """
    if not prep.ranks.is_root:
        return follow(prep, progress)
    config, engine, plan = prep.config, prep.engine, prep.plan
    timing = replace(prep.timing)
    report_dir = _new_report_dir(config.report_dir, engine.info, prep.started)
    early = _EarlyScorer(prep) if overlap and not config.update_goldens else None
    log = GenerationsLog(report_dir / "generations.jsonl", [d.id for d in prep.dataset.documents])
    try:
        t_gen = time.perf_counter()
        outputs, errors = _generate_all(prep, progress, timing=timing,
                                        on_cell=early.add if early else None, log=log)
        timing.generate_stage_s = time.perf_counter() - t_gen
        goldens, written = dict(prep.goldens), []
        if config.update_goldens:
            goldens, written = _record_goldens(prep, outputs, errors, timing)
    except BaseException:
        if early:
            early.close()
        raise
    finally:
        log.close()
        for used in (engine, prep.golden_engine):
            close = getattr(used, "close", None)
            if callable(close):
                close()
    t_after = time.perf_counter()
    baselines = _baselines(prep, goldens, outputs)
    analyses, scores, unscored = _score_and_analyse(prep, baselines, outputs, errors, early, timing)
    errors = {**errors, **unscored}
    lengths = _lengths(prep)
    findings = match_findings(analyses, scores, plan, lengths, prep.limits)
    now = time.perf_counter()
    timing.after_generation_s = now - t_after
    timing.harness_total_s = now - prep.t0
    timing.scoring_overlapped = early is not None
    cells = tuple(CellResult(cell=c, checks=prep.checks[c], analysis=analyses.get(c),
                             error=errors.get(c), finding=findings.get(c)) for c in plan.cells)
    result = RunResult(config=config, engine=engine.info, limits=prep.limits, dataset=prep.dataset,
                       plan=plan, baseline={w: name for w, (name, _) in baselines.items()},
                       cells=cells, outputs=tuple(outputs[c] for c in plan.all_cells if c in outputs),
                       started=prep.started.isoformat(timespec="seconds"),
                       seconds=time.perf_counter() - prep.t0, memory=prep.memory,
                       cache=prep.cache.stats.as_dict() if prep.cache else {},
                       baseline_texts={w: texts for w, (_, texts) in baselines.items()},
                       goldens_paths={w: str(prep.store.path_for(engine.info.identity,
                                                                 prep.dataset.name, w))
                                      for w in goldens},
                       finished=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                       goldens_written=tuple(written),
                       report_dir=report_dir, prompts=prep.prompts, ranks=prep.ranks,
                       timing=timing.as_dict(), scores=tuple(cs for cs, _ in scores.values()),
                       levels={cs.cell.beam_width: level for cs, level in scores.values()},
                       grid=prep.grid or plan.cells, prompt_lengths=lengths)
    from harness.report.writer import write_report

    try:
        write_report(result, report_dir)
    except OSError as exc:  # disk full, folder removed: one line naming the folder
        raise HarnessError(f"--report-dir: writing the report to {report_dir} failed "
                           f"({exc.strerror or exc}); free space or choose another folder") from None
    return result


def _generate_all(prep: Prepared, progress: Callable[[int], Progress] | None,
                  timing: Timing | None = None,
                  on_cell: Callable[[Cell, Outputs], None] | None = None,
                  log: GenerationsLog | None = None
                  ) -> tuple[dict[Cell, Outputs], dict[Cell, str]]:
    """Every cell's outputs, each handed to ``on_cell`` as soon as it is complete; an engine
    fault fails its cell, not the run. With ``log`` each complete cell's texts (and beams) go
    to generations.jsonl first and are read back from there, so memory does not grow with
    the run."""
    tick = progress(prep.plan.sequences()) if progress else (lambda k: None)
    outputs: dict[Cell, Outputs] = {}
    errors: dict[Cell, str] = {}
    for cell in prep.plan.all_cells:
        try:
            outputs[cell] = _generate_cell(prep.engine, cell, prep.plan, list(prep.prompts),
                                           prep.config, tick, prep.cache, timing)
        except HarnessError:
            raise
        except Exception as exc:
            errors[cell] = _error_text(exc)
            continue
        if log is not None:
            outputs[cell] = Outputs(cell=cell, texts=log.add(cell.id, outputs[cell].texts,
                                                             outputs[cell].beams))
        if on_cell is not None:
            on_cell(cell, outputs[cell])
    return outputs, errors


def _baselines(prep: Prepared, goldens: dict[int, GoldenSet], outputs: dict[Cell, Outputs]
               ) -> dict[int, tuple[str, tuple[str, ...]]]:
    """Per beam width: (where the baseline comes from, one text per document)."""
    out: dict[int, tuple[str, tuple[str, ...]]] = {}
    for w in prep.config.beam_widths:
        if w in goldens:
            path = prep.store.path_for(prep.engine.info.identity, prep.dataset.name, w)
            out[w] = (f"goldens {path}",
                      tuple(goldens[w].outputs[d.id] for d in prep.dataset.documents))
        elif Cell(1, w) in outputs:
            out[w] = ("batch size 1 of this run", outputs[Cell(1, w)].texts[0])
    return out


def _lengths(prep: Prepared) -> tuple[int, ...]:
    """Prompt lengths for the padding signature: tokens, else words."""
    return prep.prompt_lengths or tuple(len(p.split()) for p in prep.prompts)


def match_findings(analyses: dict[Cell, CellAnalysis],
                   scores: dict[Cell, tuple[CellScores, tuple[float, ...]]], plan: Plan,
                   lengths: Sequence[int], limits: EngineLimits | None) -> dict[Cell, Finding]:
    """Match the failing cells against known fault signatures (harness.verdict.signatures); ``merge``
    calls it too, over every shard's cells."""
    if not any(a.verdict == "fail" for a in analyses.values()):
        return {}
    evidence = []
    for cell, analysis in analyses.items():
        cell_scores, level = scores[cell]
        drops = tuple(tuple(lv - s for lv, s in zip(level, row)) for row in cell_scores.baseline)
        evidence.append(CellEvidence(analysis=analysis, drops=drops,
                                     shorter=shortfall(plan, cell, lengths)))
    return match(evidence, limits)


def _level(base: Sequence[str], bs1: Sequence[str]) -> tuple[tuple[float, ...], float]:
    """Batch size 1's per-prompt ROUGE-L against the baseline, and the CPU seconds it took."""
    start = time.thread_time()
    return tuple(rouge_l(base, bs1)), time.thread_time() - start


def _visited_rouge(targets: Sequence[str], row: Sequence[str | None]) -> tuple[float, ...]:
    """ROUGE-L per prompt; NaN where the prompt never sat at this position."""
    seen = [i for i, t in enumerate(row) if t is not None]
    got = rouge_l([targets[i] for i in seen], [row[i] for i in seen])  # type: ignore[misc]
    out = [math.nan] * len(row)
    for i, value in zip(seen, got):
        out[i] = value
    return tuple(out)


def _score_cell(cell: Cell, base: Sequence[str], references: Sequence[str],
                texts: tuple[tuple[str | None, ...], ...]) -> tuple[CellScores, float]:
    """One cell's ROUGE-L against baseline and references, and the CPU seconds it took."""
    start = time.thread_time()
    scores = CellScores(cell=cell, baseline=tuple(_visited_rouge(base, t) for t in texts),
                        reference=tuple(_visited_rouge(references, t) for t in texts))
    return scores, time.thread_time() - start


class _EarlyScorer:
    """Scores each cell in one worker thread as soon as its outputs and its baseline exist.

    Baselines are goldens (known from the start) or batch size 1 of this run, whose cells
    ``Plan.all_cells`` puts first. Data flows one way: the generation loop hands over
    finished outputs; ``_score_and_analyse`` takes a result only when it was computed from
    the very baseline texts it would use itself, and scores anything else on the spot.
    """

    def __init__(self, prep: Prepared) -> None:
        docs = prep.dataset.documents
        self.references = tuple(d.summary for d in docs)
        self.bases = {w: tuple(g.outputs[d.id] for d in docs) for w, g in prep.goldens.items()}
        self.under_test = set(prep.plan.cells)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-scoring")
        self.cells: dict[Cell, tuple[tuple[str, ...], Future[tuple[CellScores, float]]]] = {}
        self.levels: dict[int, tuple[tuple[str, ...], Future[tuple[tuple[float, ...], float]]]] = {}
        self.waiting: list[tuple[Cell, Outputs]] = []

    def add(self, cell: Cell, outputs: Outputs) -> None:
        w = cell.beam_width
        if cell == Cell(1, w):
            base = self.bases.setdefault(w, outputs.texts[0])
            self.levels[w] = (base, self.pool.submit(_level, base, outputs.texts[0]))
        if cell in self.under_test:
            self.waiting.append((cell, outputs))
        still = []
        for c, out in self.waiting:
            base = self.bases.get(c.beam_width)
            if base is None:
                still.append((c, out))
            else:
                self.cells[c] = (base, self.pool.submit(_score_cell, c, base, self.references,
                                                        out.texts))
        self.waiting = still

    def level(self, w: int, base: tuple[str, ...]) -> tuple[tuple[float, ...], float] | None:
        got = self.levels.get(w)
        return got[1].result() if got and got[0] == base else None

    def cell(self, cell: Cell, base: tuple[str, ...]) -> tuple[CellScores, float] | None:
        got = self.cells.get(cell)
        return got[1].result() if got and got[0] == base else None

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _score_and_analyse(prep: Prepared, baselines: dict[int, tuple[str, tuple[str, ...]]],
                       outputs: dict[Cell, Outputs], errors: dict[Cell, str],
                       early: _EarlyScorer | None = None, timing: Timing | None = None
                       ) -> tuple[dict[Cell, CellAnalysis],
                                  dict[Cell, tuple[CellScores, tuple[float, ...]]],
                                  dict[Cell, str]]:
    """ROUGE-L of every output against baseline and reference, analysed; plus the cells that
    could not be scored (no batch-size-1 level for their beam width) with the reason. Scores
    ``early`` computed while the engine was generating are used where they rest on the same
    baseline."""
    unscored: dict[Cell, str] = {}
    references = tuple(d.summary for d in prep.dataset.documents)
    spent = 0.0
    levels: dict[int, tuple[float, ...]] = {}
    scores: list[CellScores] = []
    try:
        for w, (_, texts) in baselines.items():
            if Cell(1, w) in outputs:
                got = (early.level(w, texts) if early else None) or _level(
                    texts, outputs[Cell(1, w)].texts[0])
                levels[w], spent = got[0], spent + got[1]
        for cell in prep.plan.cells:
            w = cell.beam_width
            if cell in errors:
                continue
            if w not in levels:
                unscored[cell] = (f"no batch-size-1 baseline for beam width {w}: "
                                  f"{errors.get(Cell(1, w), 'batch size 1 produced nothing')}")
                continue
            base = baselines[w][1]
            got_cell = (early.cell(cell, base) if early else None) or _score_cell(
                cell, base, references, outputs[cell].texts)
            scores.append(got_cell[0])
            spent += got_cell[1]
    finally:
        if early:
            early.close()
    if timing is not None:
        timing.scoring_s += spent
    analyses = analyze(scores, levels, tolerance=prep.config.tolerance, alpha=prep.config.alpha)
    by_cell = {cs.cell: (cs, levels[cs.cell.beam_width]) for cs in scores}
    return {a.cell: a for a in analyses}, by_cell, unscored


def _record_goldens(prep: Prepared, outputs: dict[Cell, Outputs], errors: dict[Cell, str],
                    timing: Timing | None = None) -> tuple[dict[int, GoldenSet], list[str]]:
    """Goldens from batch size 1 of this engine or of --golden-engine; written only when complete."""
    config, engine, dataset, plan = prep.config, prep.engine, prep.dataset, prep.plan
    source_engine, source = engine, outputs
    if prep.golden_engine is not None:
        source_engine, source = prep.golden_engine, {}
        for w in config.beam_widths:
            cell = Cell(1, w)
            try:
                source[cell] = _generate_cell(source_engine, cell, plan, list(prep.prompts), config,
                                              lambda k: None, timing=timing)
            except Exception as exc:
                raise HarnessError(f"--golden-engine {config.golden_engine}: {cell.id} failed "
                                   f"({_error_text(exc)}); goldens were left unchanged") from None
    failed = {c: errors.get(c, "no output") for c in plan.reference_cells if c not in source}
    if failed:
        raise HarnessError(
            "--update-goldens: batch size 1 did not complete (" + "; ".join(
                f"{c.id}: {m}" for c, m in failed.items()) + "); goldens were left unchanged")
    goldens: dict[int, GoldenSet] = {}
    for w in config.beam_widths:
        texts = source[Cell(1, w)].texts[0]
        goldens[w] = GoldenSet(
            identity=engine.info.identity, dataset_name=dataset.name, dataset_hash=dataset.hash,
            settings=config.decoding(w).as_dict(),
            outputs={d.id: t for d, t in zip(dataset.documents, texts)},
            source={"backend": source_engine.info.backend, "engine": source_engine.info.path,
                    "identity": source_engine.info.identity, "batch_size": 1,
                    "harness_version": __version__})
    written = [str(path) for path in prep.store.write_all(goldens)]
    return goldens, written


def summary_lines(result: RunResult) -> list[str]:
    """Per-cell, per-position scores for terminals."""
    lines = []
    for c in result.cells:
        if c.error:
            lines.append(f"{c.cell.id:>12}  ERROR  {c.error}")
            continue
        a = c.analysis
        assert a is not None
        marks = " ".join(f"{'*' if s.degraded else ' '}{s.rouge_l:.2f}" for s in a.positions)
        lines.append(f"{c.cell.id:>12}  {a.verdict.upper():5}  {marks}")
    return lines
