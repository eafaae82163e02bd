"""The report stage's first half: a run's results as a typed, sealed ``Report``.

``cell_entry`` is shared with ``merge``, which rebuilds every cell from the union of its
shards' scores with the same code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from pathlib import Path

from harness import __version__
from harness.config import RunConfig
from harness.inputs.data import Dataset, build_prompt
from harness.report.model import seal
from harness.report.provenance import engine_files, environment
from harness.results import (
    SCHEMA_VERSION,
    CellEntry,
    CellResult,
    DatasetInfo,
    DropTest,
    EngineFile,
    EngineSection,
    Example,
    GoldenFile,
    Method,
    PositionEntry,
    PositionStats,
    RanksInfo,
    Report,
    RunResult,
    ShardCellScores,
    ShardInfo,
    ShardLevels,
    ShardScores,
    Signoff,
    SubsetInfo,
    Timing,
    Verdict,
)
from harness.storage.cache import CacheStats
from harness.verdict.failures import likely_cause

EXAMPLES_PER_CELL = 3
PROMPT_CHARS = 600
TEST = ("three questions per cell and position (docs/method.md): position dependence (agreement "
        "with the baseline below the other positions of the batch, same prompts), batch-size "
        "quality (ROUGE-L against the references below batch size 1, same prompts; per cell "
        "too), determinism (outputs that differ from batch size 1); one-sided paired t-tests of "
        "the drop against the tolerance, Holm-corrected over all tests of the run")
PLANS = {"full": "cyclic rotation: every prompt at every position once per cell",
         "sparse": "sparse rotation: every prompt at one position per cell"}


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


def worst_position(c: CellResult) -> int | None:
    """The degraded position that lost most (quality where measured, else agreement): the one
    the examples show."""
    a = c.analysis
    if a is None or not a.degraded_positions:
        return None
    return min(a.degraded_positions, key=lambda p: (a.positions[p].quality
                                                    if a.positions[p].quality is not None
                                                    else a.positions[p].agreement))


def examples_at(result: RunResult, c: CellResult, position: int) -> tuple[Example, ...]:
    """A few prompts at ``position`` whose output differs from the baseline."""
    outputs = {o.cell: o for o in result.outputs}.get(c.cell)
    base = result.baselines.get(c.cell.beam_width)
    if outputs is None or base is None:
        return ()
    docs, row = result.dataset.documents, outputs.texts[position]
    picks = [i for i in range(len(docs)) if row[i] is not None and row[i] != base.texts[i]]
    return tuple(Example(position=position, id=docs[i].id,
                         prompt=(result.prompts[i] if result.prompts else
                                 build_prompt(result.config.prompt_template, docs[i]))[:PROMPT_CHARS],
                         baseline=base.texts[i], output=row[i])  # type: ignore[arg-type]
                 for i in picks[:EXAMPLES_PER_CELL])


def _test(test: DropTest | None) -> DropTest | None:
    if test is None:
        return None
    return dataclasses.replace(test, drop=round(test.drop, 6), p_value=round(test.p_value, 12),
                               p_adjusted=_round(test.p_adjusted, 12))


def _position(s: PositionStats) -> PositionEntry:
    return PositionEntry(
        position=s.position, n=s.n, agreement=round(s.agreement, 6), ci_low=_round(s.ci_low),
        ci_high=_round(s.ci_high), agreement_drop=round(s.agreement_drop, 6),
        differing=round(s.differing, 6), quality=_round(s.quality), quality_bs1=_round(s.quality_bs1),
        position_test=_test(s.position_test), quality_test=_test(s.quality_test),
        degraded=s.degraded, nondeterministic=s.nondeterministic)


def cell_entry(c: CellResult, examples: Sequence[Example]) -> CellEntry:
    """One entry of the report's ``cells`` (shared with ``merge``)."""
    a = c.analysis
    return CellEntry(
        id=c.cell.id, batch_size=c.cell.batch_size, beam_width=c.cell.beam_width,
        verdict=c.verdict, limits_verdict=Verdict.FAIL if c.limit_failures else Verdict.PASS,
        error=c.error, message=c.error or _message(c), cause=likely_cause(c),
        pattern=c.finding.kind if c.finding else None,
        evidence=c.finding.evidence if c.finding else None,
        baseline_level=_round(a.level) if a else None,
        quality=_round(a.quality) if a else None, quality_bs1=_round(a.quality_bs1) if a else None,
        differing=_round(a.differing) if a else None, drift=a.drift if a else None,
        degraded_positions=a.degraded_positions if a else (),
        nondeterministic_positions=a.nondeterministic_positions if a else (),
        omnibus=_test(a.omnibus) if a else None,
        positions=tuple(_position(s) for s in (a.positions if a else ())),
        limit_checks=c.checks, examples=tuple(examples), notice=c.notice)


def questions(config: RunConfig, has_references: bool) -> dict[str, str]:
    """What each question is in this run: a gate, a figure, or not answered (and why)."""
    quality = ("gate" if has_references else
               "not answered: the dataset has no reference summaries; the gate uses position "
               "dependence" + (" and determinism" if config.deterministic else "") +
               " only, so damage that hits every position alike is not caught")
    return {"position dependence": "gate", "batch-size quality": quality,
            "determinism": "gate (--deterministic)" if config.deterministic else "reported"}


def _message(c: CellResult) -> str:
    """The analysis's message, after the notice when the engine did not run the cell as asked."""
    text = c.analysis.message if c.analysis else ""
    return f"{c.cell.id}: {c.notice} ({text})" if c.notice else text


def _nulls(row: Sequence[float]) -> tuple[float | None, ...]:
    """JSON has no NaN: a prompt that never sat at a position (sparse) is null."""
    return tuple(None if math.isnan(x) else x for x in row)


def _shard_blocks(result: RunResult) -> tuple[ShardInfo | None, ShardScores | None]:
    """For --shard runs: which cells this shard ran, and what ``merge`` needs to analyse the
    union as one run: per-prompt scores (unrounded), batch size 1's levels, the prompt
    order and lengths the fault signatures use, and the examples of every degraded position
    (Holm over more tests can only clear positions, never add them, so the worst merged
    position is always among them)."""
    if not result.config.shard:
        return None, None
    k, n = result.config.shard
    by_cell = {c.cell: c for c in result.cells}
    scored = {}
    for cs in result.scores:
        c = by_cell[cs.cell]
        examples = {str(p): examples_at(result, c, p)
                    for p in (c.analysis.degraded_positions if c.analysis else ())}
        scored[cs.cell.id] = ShardCellScores(baseline=tuple(_nulls(r) for r in cs.baseline),
                                             reference=tuple(_nulls(r) for r in cs.reference),
                                             differs=tuple(_nulls(r) for r in cs.differs),
                                             examples=examples)
    info = ShardInfo(index=k, count=n, cells=tuple(c.cell.id for c in result.cells),
                     grid=tuple(c.id for c in result.grid))
    levels = {w: ShardLevels(agreement=_nulls(lv.agreement), quality=_nulls(lv.quality))
              for w, lv in result.levels.items()}
    return info, ShardScores(levels=levels, cells=scored, order=result.plan.order,
                             prompt_lengths=tuple(result.prompt_lengths))


def dataset_info(dataset: Dataset) -> DatasetInfo:
    s = dataset.subset
    subset = SubsetInfo(**{**s.as_dict(), "ids": tuple(s.ids)}) if s else None
    return DatasetInfo(name=dataset.name, path=dataset.path, count=len(dataset), hash=dataset.hash,
                       source=dataset.source, config=dataset.config, split=dataset.split,
                       revision=dataset.revision, text_field=dataset.text_field,
                       summary_field=dataset.summary_field, subset=subset)


def rounded(timing: Timing) -> Timing:
    """Timing figures to 0.1 ms, as reported."""
    return dataclasses.replace(timing, **{
        f.name: round(v, 4) for f in dataclasses.fields(timing)
        if isinstance(v := getattr(timing, f.name), float)})


def _goldens(result: RunResult) -> dict[int, GoldenFile]:
    out = {}
    for w, base in result.baselines.items():
        if base.goldens_path is not None:
            file = Path(base.goldens_path)
            out[w] = GoldenFile(path=base.goldens_path, sha256=hashlib.sha256(
                file.read_bytes()).hexdigest() if file.is_file() else None)
    return out


def build_report(result: RunResult) -> Report:
    """The sealed report of one run."""
    cells = tuple(cell_entry(c, () if (w := worst_position(c)) is None else examples_at(result, c, w))
                  for c in result.cells)
    shard, scores = _shard_blocks(result)
    info = result.engine
    plan = result.plan
    report = Report(
        schema_version=SCHEMA_VERSION, verdict=result.verdict, started=result.started,
        finished=result.finished, seconds=round(result.seconds, 2), harness_version=__version__,
        signoff=Signoff(by=result.config.signoff_by, at=result.finished, engine=info.path,
                        identity=info.identity, verdict=result.verdict),
        engine=EngineSection(path=info.path, backend=info.backend, identity=info.identity,
                             details=info.details,
                             files=tuple(EngineFile(**f) for f in engine_files(info.path))),
        limits=result.limits, memory=result.memory,
        cache=result.cache or CacheStats(folder=None, enabled=False, reason="off"),
        dataset=dataset_info(result.dataset),
        ranks=RanksInfo(world_size=result.ranks.world, source=result.ranks.source),
        baseline={w: b.source for w, b in result.baselines.items()}, goldens=_goldens(result),
        goldens_written=result.goldens_written,
        method=Method(tolerance=result.config.tolerance, alpha=result.config.alpha,
                      seed=plan.seed, sequences=plan.sequences(), test=TEST,
                      plan=PLANS[plan.rotation], rotation=plan.rotation,
                      deterministic=result.config.deterministic,
                      questions=questions(result.config, result.dataset.has_references)),
        options=result.config.as_dict(), environment=environment(),
        timing=rounded(result.timing), cells=cells, shard=shard, scores=scores)
    return seal(report)
