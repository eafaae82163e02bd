"""Stage 1, prepare: load the dataset and the engine, plan the cells, check build limits,
goldens and folders. Nothing is generated, so bad input stops the run before GPU time."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from harness.config import RunConfig
from harness.engines import guard
from harness.engines.base import Engine, EngineBase, code_class
from harness.engines.registry import adopt, load_engine, peek_config
from harness.engines.watchdog import BatchTimeoutEngine
from harness.inputs.data import load_dataset, select_subset
from harness.inputs.prompts import build_prompts
from harness.limits.engine_config import read_limits
from harness.limits.preflight import preflight
from harness.limits.ranks import current, require_world
from harness.model.cell import Cell
from harness.model.dataset import Dataset
from harness.model.limits import EngineLimits
from harness.model.ranks import Ranks
from harness.model.report import Timing
from harness.model.vocab import Backend
from harness.plan import cells_for, choose_batch_sizes, make_plan, shard_cells
from harness.stages.run import Prepared
from harness.storage.cache import GenerationCache
from harness.storage.cache_key import engine_code, key_inputs
from harness.storage.cache_key import fingerprint as cache_fingerprint
from harness.storage.folders import check_writable
from harness.storage.goldens import GoldenSet, GoldensStore


def planned_batch_sizes(config: RunConfig) -> tuple[int, ...]:
    """Batch sizes from options and config.json alone (no engine load), so that test ids at
    collection and the cells of the run are the same."""
    if config.batch_sizes is not None:
        return config.batch_sizes
    limits = peeked_limits(config)
    top = limits.max_batch_size if limits else None
    return choose_batch_sizes(None, top, sweep=config.sweep, engine=config.engine)


def peeked_limits(config: RunConfig) -> EngineLimits | None:
    """The build limits in config.json, read before the engine loads."""
    return read_limits(
        peek_config(config.engine, config.backend), str(Path(config.engine).expanduser() / "config.json")
    )


def planned_cells(config: RunConfig) -> list[Cell]:
    """The cells a run will test (for test ids): this shard's only, with --shard."""
    cells = cells_for(planned_batch_sizes(config), config.beam_widths)
    return list(shard_cells(cells, *config.shard) if config.shard else cells)


def load_run_dataset(config: RunConfig) -> Dataset:
    """The run's documents (the --num-prompts subset, when asked)."""
    dataset = load_dataset(
        config.data.dataset,
        text_field=config.data.text_field,
        summary_field=config.data.summary_field,
        config=config.data.dataset_config,
        split=config.data.split,
    )
    if config.data.num_prompts is not None:
        dataset = select_subset(dataset, config.data.num_prompts, config.seed)
    return dataset


def _engine(
    config: RunConfig, given: object | None, ranks: Ranks, timing: Timing
) -> tuple[EngineBase, EngineLimits | None]:
    """The engine under test and its limits; one process per engine rank, checked before a
    multi-GPU engine loads."""
    if given is None:
        peeked = peeked_limits(config)
        if peeked is not None:
            require_world(ranks, peeked.tp_size, peeked.pp_size, engine=config.engine)
    t_load = time.perf_counter()
    engine = (
        adopt(given)
        if given is not None
        else load_engine(config.engine, config.backend, options=config.engine_options, roots=config.roots)
    )
    timing.engine_load_s = time.perf_counter() - t_load
    limits = engine.limits
    require_world(
        ranks,
        limits.tp_size if limits else None,
        limits.pp_size if limits else None,
        engine=config.engine if given is None else engine.info.path,
    )
    return engine, limits


def _goldens(
    config: RunConfig, store: GoldensStore, engine: Engine, dataset: Dataset
) -> dict[int, GoldenSet]:
    """The goldens this run compares with, per beam width (none when it records them)."""
    if config.update_goldens:
        check_writable(
            config.goldens_dir,
            "--goldens-dir",
            "choose a writable folder for the goldens, or drop --update-goldens",
        )
        # before anything is generated: no link on the way, no other dataset's file replaced
        store.check_update(engine.info.identity, dataset.info.name, config.beam_widths)
        return {}
    goldens: dict[int, GoldenSet] = {}
    for w in config.beam_widths:
        found = store.load(engine.info.identity, dataset, config.decoding(w))
        if found is not None:
            goldens[w] = found
    return goldens


def _cache(config: RunConfig, engine: Engine, ranks: Ranks) -> GenerationCache:
    if config.no_cache:
        return GenerationCache(None, None, "off (--no-cache)")
    if ranks.world_size > 1:  # a rank that skipped a cached batch would leave the others waiting
        return GenerationCache(
            None, None, f"off (MPI world of {ranks.world_size}: every rank generates every batch)"
        )
    code = engine_code(code_class(engine))
    key = key_inputs(engine.info, config.engine_options, code) if code is not None else None
    fingerprint = cache_fingerprint(key) if key is not None else None
    if fingerprint:
        check_writable(config.cache_dir, "--cache-dir", "choose a writable folder, or run with --no-cache")
    return GenerationCache(
        config.cache_dir,
        fingerprint,
        ""
        if fingerprint
        else (
            "off (a server's answers are not cached)"
            if engine.info.backend == Backend.OPENAI
            else "off (the engine's class has no source file to key its outputs by)"
            if code is None
            else "off (the engine has no directory to fingerprint)"
        ),
        key=key,
    )


def prepare(config: RunConfig, *, engine: object | None = None) -> Prepared:
    """Load dataset and engine, plan the cells, check limits and goldens; generate nothing.
    ``engine``: an engine object to test in place of loading ``config.engine`` (any object with
    ``generate``, checked as a plug-in is)."""
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.perf_counter()
    dataset = load_run_dataset(config)
    ranks, timing = current(), Timing()
    under_test, limits = _engine(config, engine, ranks, timing)
    # test ids were made from config.json alone (planned_batch_sizes); an engine handed in
    # directly has no test ids to agree with, so its own limits cap the grid
    sizes = (
        choose_batch_sizes(
            config.batch_sizes,
            limits.max_batch_size if limits else None,
            sweep=config.sweep,
            engine=config.engine,
        )
        if engine is not None
        else planned_batch_sizes(config)
    )
    plan = make_plan(sizes, config.beam_widths, len(dataset), config.seed, config.rotation)
    info = under_test.info
    prompts = build_prompts(
        dataset.documents,
        config.prompt_template,
        chat=config.chat,
        tokenizer=under_test.tokenizer,
        label=f"{info.backend} engine" + (f" {info.path}" if info.path != info.backend else ""),
    )
    lengths = guard.count_tokens(under_test, prompts)
    # preflight covers the whole grid, so every shard's report carries the same checks and budgets
    checked = preflight(
        plan.cells,
        limits,
        engine_dir=under_test.info.path,
        prompt_lengths=list(lengths) if lengths is not None else None,
        max_new_tokens=config.max_new_tokens,
        gpu_option=config.gpu_memory,
    )
    grid = plan.cells
    if config.shard:
        plan = plan.shard(*config.shard)
    check_writable(config.report_dir)
    store = GoldensStore(config.goldens_dir)
    goldens = _goldens(config, store, under_test, dataset)
    t_load = time.perf_counter()
    golden_engine = (
        load_engine(config.golden_engine, None, config.engine_options, strict=False, roots=config.roots)
        if config.golden_engine and ranks.is_root
        else None
    )
    timing.engine_load_s += time.perf_counter() - t_load
    cache = _cache(config, under_test, ranks)
    if config.batch_timeout is not None:
        under_test = BatchTimeoutEngine(under_test, config.batch_timeout)
        if golden_engine is not None:
            golden_engine = BatchTimeoutEngine(golden_engine, config.batch_timeout)
    timing.prepare_s = time.perf_counter() - t0
    return Prepared(
        config=config,
        dataset=dataset,
        engine=under_test,
        limits=limits,
        plan=plan,
        prompts=prompts,
        checks=checked.checks,
        memory=checked.memory,
        goldens=goldens,
        store=store,
        started=started,
        t0=t0,
        golden_engine=golden_engine,
        cache=cache,
        prompt_lengths=lengths,
        ranks=ranks,
        timing=timing,
        grid=grid,
    )
