"""The whole run, one way: config -> preflight -> plan -> generate -> score -> analyse -> report.

``run(config)`` is what both the pytest plugin and ``python -m harness run`` call.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness import __version__
from harness.analysis import CellAnalysis, CellScores, analyze
from harness.config import RunConfig
from harness.data import Dataset, build_prompt, load_dataset
from harness.engines.base import Engine, EngineInfo
from harness.engines.registry import load_engine, peek_config
from harness.errors import ConfigError, HarnessError
from harness.goldens import GoldenSet, GoldensStore
from harness.plan import Cell, Plan, cells_for, choose_batch_sizes, make_plan
from harness.preflight import EngineLimits, LimitCheck, check_cell, read_limits
from harness.scoring import rouge_l


@dataclass(frozen=True)
class CellResult:
    """Everything known about one cell under test."""

    cell: Cell
    checks: tuple[LimitCheck, ...]
    analysis: CellAnalysis | None
    error: str | None = None

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
    """Texts generated for one cell, indexed [position][document index]."""

    cell: Cell
    texts: tuple[tuple[str, ...], ...]


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
    goldens_written: tuple[str, ...] = ()
    report_dir: Path | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def verdict(self) -> str:
        bad = any(c.verdict != "pass" or c.limit_failures for c in self.cells)
        return "fail" if bad else "pass"


Progress = Callable[[int], None]


def _new_report_dir(root: Path, engine: EngineInfo, started: dt.datetime) -> Path:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--report-dir {root}: cannot create ({exc.strerror}); "
                          "choose a writable folder") from None
    stem = f"run-{started:%Y%m%d-%H%M%S}-{engine.backend.replace(':', '-').replace('.', '-')}"
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
                   tick: Progress) -> Outputs:
    n = len(plan.order)
    texts: list[list[str]] = [[""] * n for _ in range(cell.batch_size)]
    settings = config.decoding(cell.beam_width)
    for batch in plan.batches(cell):
        gens = engine.generate([prompts[d] for d in batch.documents], settings)
        if len(gens) != len(batch.documents):
            raise RuntimeError(f"the engine returned {len(gens)} outputs for a batch of "
                               f"{len(batch.documents)}")
        for position, (doc, gen) in enumerate(zip(batch.documents, gens)):
            texts[position][doc] = gen.text if isinstance(gen.text, str) else ""
        tick(len(batch.documents))
    return Outputs(cell=cell, texts=tuple(tuple(t) for t in texts))


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def planned_cells(config: RunConfig) -> list[Cell]:
    """The cells a run will test, known from options and config.json alone (for test ids)."""
    limits = read_limits(peek_config(config.engine, config.backend))
    sizes = choose_batch_sizes(config.batch_sizes, limits.max_batch_size if limits else None)
    return list(cells_for(sizes, config.beam_widths))


def run(config: RunConfig, *, progress: Callable[[int], Progress] | None = None,
        engine: Engine | None = None) -> RunResult:
    """Run the pipeline once and write the report; raises HarnessError for bad input."""
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.perf_counter()
    dataset = load_dataset(config.dataset, text_field=config.text_field,
                           summary_field=config.summary_field)
    engine = engine or load_engine(config.engine, config.backend)
    limits = read_limits(engine.info.config)
    batch_sizes = choose_batch_sizes(config.batch_sizes, limits.max_batch_size if limits else None)
    plan = make_plan(batch_sizes, config.beam_widths, len(dataset), config.seed)
    prompts = [build_prompt(config.prompt_template, d) for d in dataset.documents]

    counter = getattr(engine, "count_tokens", None)
    lengths = counter(prompts) if callable(counter) else None
    longest = max(lengths) if lengths else None
    over = sum(1 for x in lengths if limits and limits.max_input_len and x > limits.max_input_len) \
        if lengths else 0
    checks = {c: tuple(check_cell(c, limits, longest_prompt=longest, prompts_over_input=over,
                                  max_new_tokens=config.max_new_tokens)) for c in plan.cells}

    store = GoldensStore(config.goldens_dir)
    goldens: dict[int, GoldenSet] = {}
    if not config.update_goldens:
        for w in config.beam_widths:
            found = store.load(engine.info.identity, dataset, config.decoding(w))
            if found is not None:
                goldens[w] = found
    report_dir = _new_report_dir(config.report_dir, engine.info, started)

    tick = progress(plan.sequences()) if progress else (lambda k: None)
    outputs: dict[Cell, Outputs] = {}
    errors: dict[Cell, str] = {}
    for cell in plan.all_cells:
        try:
            outputs[cell] = _generate_cell(engine, cell, plan, prompts, config, tick)
        except HarnessError:
            raise
        except Exception as exc:  # an engine fault fails its cell, not the run
            errors[cell] = _error_text(exc)

    written: list[str] = []
    if config.update_goldens:
        goldens, written = _record_goldens(config, engine, dataset, plan, prompts, outputs, errors,
                                           store)

    baseline_names: dict[int, str] = {}
    baseline_texts: dict[int, tuple[str, ...]] = {}
    for w in config.beam_widths:
        if w in goldens:
            baseline_texts[w] = tuple(goldens[w].outputs[d.id] for d in dataset.documents)
            baseline_names[w] = f"goldens {store.path_for(engine.info.identity, dataset.name, w)}"
        elif Cell(1, w) in outputs:
            baseline_texts[w] = outputs[Cell(1, w)].texts[0]
            baseline_names[w] = "batch size 1 of this run"

    references = [d.summary for d in dataset.documents]
    scores: list[CellScores] = []
    levels: dict[int, list[float]] = {}
    for w, base in baseline_texts.items():
        levels[w] = rouge_l(base, outputs[Cell(1, w)].texts[0]) if Cell(1, w) in outputs else []
    for cell in plan.cells:
        w = cell.beam_width
        if cell in errors:
            continue
        if w not in baseline_texts or not levels.get(w):
            errors[cell] = (f"no batch-size-1 baseline for beam width {w}: "
                            f"{errors.get(Cell(1, w), 'batch size 1 produced nothing')}")
            continue
        out = outputs[cell]
        scores.append(CellScores(
            cell=cell,
            baseline=tuple(tuple(rouge_l(baseline_texts[w], texts)) for texts in out.texts),
            reference=tuple(tuple(rouge_l(references, texts)) for texts in out.texts)))
    analyses = {a.cell: a for a in analyze(scores, levels, tolerance=config.tolerance,
                                           alpha=config.alpha)}
    cells = tuple(CellResult(cell=c, checks=checks[c], analysis=analyses.get(c),
                             error=errors.get(c)) for c in plan.cells)
    result = RunResult(config=config, engine=engine.info, limits=limits, dataset=dataset,
                       plan=plan, baseline=baseline_names, cells=cells,
                       outputs=tuple(outputs[c] for c in plan.all_cells if c in outputs),
                       started=started.isoformat(timespec="seconds"),
                       seconds=time.perf_counter() - t0, goldens_written=tuple(written),
                       report_dir=report_dir)
    from harness.report.writer import write_report

    write_report(result, report_dir)
    return result


def _record_goldens(config: RunConfig, engine: Engine, dataset: Dataset, plan: Plan,
                    prompts: list[str], outputs: dict[Cell, Outputs], errors: dict[Cell, str],
                    store: GoldensStore) -> tuple[dict[int, GoldenSet], list[str]]:
    """Goldens from batch size 1 of this engine or of --golden-engine; written only when complete."""
    source_engine, source = engine, outputs
    if config.golden_engine:
        source_engine = load_engine(config.golden_engine, None)
        source = {}
        for w in config.beam_widths:
            cell = Cell(1, w)
            source[cell] = _generate_cell(source_engine, cell, plan, prompts, config, lambda k: None)
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
    written = [str(store.write(g, w)) for w, g in goldens.items()]
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


def describe(result: RunResult) -> dict[str, Any]:
    """Small facts for terminal headers."""
    return {"engine": result.engine.path, "backend": result.engine.backend,
            "dataset": f"{result.dataset.name} ({len(result.dataset)} prompts, "
                       f"hash {result.dataset.hash[:12]})",
            "baseline": result.baseline}
