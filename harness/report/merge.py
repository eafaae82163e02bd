"""``merge SHARD...``: the reports of ``--shard K/N`` runs combined into one unsharded report.

Holm's correction spans every test of a run, and the fault signatures compare cells with
each other, so a shard's own verdict is not the run's: merge re-runs the analyse stage
(``harness.stages.analyse``) over the union of the shards' per-prompt scores (the report's
``scores`` block) and rebuilds each cell's entry with the report builder's own code. The
result equals the report of the same run without ``--shard`` (cells, positions, p-values,
causes, verdict), provided the engine gives the same batch-size-1 outputs in every shard,
which merge checks.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from harness import bounds
from harness.errors import ConfigError
from harness.model.analysis import FollowUp, Looks
from harness.model.cell import Cell
from harness.model.report import (
    CacheStats,
    CellResult,
    Report,
    ShardInfo,
    ShardScores,
    Timing,
)
from harness.model.scores import CellScores, Levels
from harness.plan import Plan
from harness.report.build import blindness, questions, reported, reported_engine, worst_position
from harness.report.serialize import check_sealed, load_report, seal
from harness.verdict.decide import decide
from harness.verdict.schedules import Flights
from harness.verdict.sequential import final_alpha, with_open_engine

# Options that do not change what a run measures (paths differ between CI jobs; the engine's
# and the dataset's contents are compared by hash instead): shards may differ in them.
FREE_OPTIONS = {
    "shard",
    "report_dir",
    "cache_dir",
    "no_cache",
    "engine",
    "dataset",
    "goldens_dir",
    "signoff_by",
}


@dataclass(frozen=True)
class GenerationRow:
    """One row of generations.jsonl (harness.storage.generations): an output at a position."""

    cell: str
    position: int
    id: str
    output: str
    beams: tuple[str, ...] | None = None


_ROWS = TypeAdapter(GenerationRow)


@dataclass(frozen=True)
class Shard:
    """One shard's report folder, its report, its scores and its generations.jsonl rows (as
    read, and as each row's line)."""

    folder: Path
    report: Report
    info: ShardInfo
    scores: ShardScores
    rows: tuple[tuple[GenerationRow, str], ...]


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _load(path: str | Path) -> Shard:
    """One shard report, checked."""
    loaded = load_report(path)
    file, report = loaded.path, loaded.report
    check_sealed(loaded, "merge combines")
    if report.shard is None or report.shard.index is None or report.scores is None:
        raise ConfigError(
            f"{file}: not a shard report; merge combines the reports of runs made with --shard K/N"
        )
    gens = file.parent / "generations.jsonl"
    try:
        lines = [line for line in gens.read_text(encoding="utf-8").splitlines() if line]
        rows = tuple((_ROWS.validate_python(bounds.loads(line)), line) for line in lines)
    except (OSError, ValueError) as exc:  # ValidationError is a ValueError
        shown = f"{exc.error_count()} bad row(s)" if isinstance(exc, ValidationError) else str(exc)
        raise ConfigError(
            f"{gens}: cannot read the shard's generations ({shown}); merge needs "
            "the whole report folder as the run wrote it"
        ) from None
    return Shard(file.parent, report, report.shard, report.scores, rows)


def _settings(shard: Shard) -> dict[str, object]:
    """What must be equal in every shard of one run, by the name a user knows it by."""
    report = shard.report
    out: dict[str, object] = {_flag(k): v for k, v in report.options.items() if k not in FREE_OPTIONS}
    eng = report.engine
    out["engine"] = (eng.backend, eng.identity, sorted((f.name, f.sha256) for f in eng.files))
    out["engine limits"] = report.limits
    out["dataset"] = report.dataset.hash
    out["harness version"] = report.harness_version
    out["shard count"] = shard.info.count
    out["cell grid"] = shard.info.grid
    out["prompt order"] = shard.scores.order
    out["prompt lengths"] = shard.scores.prompt_lengths
    return out


def _check_same_run(shards: Sequence[Shard]) -> None:
    first = shards[0]
    want = _settings(first)
    for shard in shards[1:]:
        got = _settings(shard)
        for key in [*want, *(k for k in got if k not in want)]:  # options first, in order
            if want.get(key) != got.get(key):
                shown = (
                    f" ({want.get(key)!r} vs {got.get(key)!r})"
                    if key.startswith("--") or key == "shard count"
                    else ""
                )
                raise ConfigError(
                    f"{shard.folder} and {first.folder} differ in {key}{shown}: they "
                    "are not shards of one run; merge only reports of the same "
                    "engine, dataset and settings"
                )


def _check_complete(shards: Sequence[Shard]) -> None:
    count = shards[0].info.count
    by_index: dict[int, Path] = {}
    for shard in shards:
        k = shard.info.index or 0
        if k in by_index:
            raise ConfigError(f"shard {k}/{count} given twice: {by_index[k]} and {shard.folder}")
        by_index[k] = shard.folder
    missing = [k for k in range(1, count + 1) if k not in by_index]
    if missing:
        raise ConfigError(
            f"shard(s) {', '.join(f'{k}/{count}' for k in missing)} missing: merge "
            f"needs all {count} shard reports of the run"
        )
    owner: dict[str, Path] = {}
    for shard in shards:
        for cid in shard.info.cells or ():
            if cid in owner:
                raise ConfigError(
                    f"cell {cid} is in both {owner[cid]} and {shard.folder}: the "
                    "shards overlap; merge reports of one --shard K/N split"
                )
            owner[cid] = shard.folder
    lost = [cid for cid in shards[0].info.grid or () if cid not in owner]
    if lost:
        raise ConfigError(
            f"cell(s) {', '.join(lost)} are in no shard report: the shards do not cover the grid"
        )


def _agreeing(
    shards: Sequence[Shard], beam_widths: Sequence[int]
) -> tuple[dict[int, Levels], dict[str, list[str]]]:
    """Batch size 1's levels and generation lines by cell, checked equal across shards where
    they overlap (a sequential run's shard generates batch size 1 only for the prompts its
    cells seated: the shards' rows are joined)."""
    levels: dict[int, Levels] = {}
    rows: dict[str, dict[tuple[int, str], str]] = {}
    lines: dict[str, list[str]] = {}
    seen: dict[str, Path] = {}
    for shard in shards:
        # different outputs first: they say why the scores below would differ
        for row, line in shard.rows:
            held = rows.setdefault(row.cell, {})
            key = (row.position, row.id)
            if key in held and held[key] != row.output:
                raise ConfigError(
                    f"{shard.folder} and {seen[row.cell]} hold different outputs for {row.cell}: the engine "
                    "did not repeat its batch-size-1 outputs across the shard runs, so their "
                    "baselines differ; rerun the shards with one shared --cache-dir or with goldens"
                )
            if key not in held:
                held[key] = row.output
                lines.setdefault(row.cell, []).append(line)
            seen.setdefault(row.cell, shard.folder)
        for w, values in shard.scores.levels.items():
            joined = _joined_levels(levels.get(w, values), values)
            if joined is None:
                raise ConfigError(
                    f"{shard.folder}: batch size 1 scores against the baseline of "
                    f"beam width {w} differ from another shard's; the shards' "
                    "baselines differ, rerun them with one shared --cache-dir or "
                    "with goldens"
                )
            levels[w] = joined
    order = sorted(levels, key=lambda w: beam_widths.index(w) if w in beam_widths else w)
    return {w: levels[w] for w in order}, lines


def _joined_levels(a: Levels, b: Levels) -> Levels | None:
    """Two shards' batch-size-1 levels as one: equal where both scored a prompt (NaN: nothing
    scored there), each one's where only it did; None where they differ."""
    out = []
    for x, y in zip(_LEVELS.dump_python(a).values(), _LEVELS.dump_python(b).values()):
        if len(x) != len(y):
            return None
        joined = []
        for u, v in zip(x, y):
            if not (math.isnan(u) or math.isnan(v)) and u != v:
                return None
            joined.append(v if math.isnan(u) else u)
        out.append(tuple(joined))
    return Levels(*out)


_LEVELS = TypeAdapter(Levels)


def _shard_cells(shards: Sequence[Shard]) -> dict[str, tuple[Shard, CellResult, CellScores | None]]:
    """Every cell's shard, its entry in that shard's report and its per-prompt scores (None:
    an engine error)."""
    out: dict[str, tuple[Shard, CellResult, CellScores | None]] = {}
    for shard in shards:
        scored = shard.scores.cells
        for c in shard.report.cells:
            if c.id not in scored and c.error is None:
                raise ConfigError(
                    f"{shard.folder}: report.json has no scores for {c.id}; the "
                    "report is damaged, rerun that shard"
                )
            out[c.id] = (shard, c, scored.get(c.id))
    return out


def _timing(parts: Sequence[Timing]) -> Timing:
    """Shard timings summed (device time over all shards), and how many were merged."""
    total = Timing(scoring_overlapped=all(t.scoring_overlapped for t in parts), merged_shards=len(parts))
    for f in dataclasses.fields(Timing):
        if f.name not in ("scoring_overlapped", "merged_shards"):
            setattr(total, f.name, round(sum(getattr(t, f.name) for t in parts), 4))
    total.engine_calls = int(total.engine_calls)
    return total


def _cache(reports: Sequence[Report]) -> CacheStats:
    base = reports[0].cache
    return dataclasses.replace(
        base,
        **{
            k: sum(getattr(r.cache, k) for r in reports)
            for k in (
                "batches_from_cache",
                "batches_generated",
                "generations_from_cache",
                "batches_rejected",
                "passes_from_cache",
            )
        },
    )


def _follow_ups(parts: Sequence[FollowUp | None]) -> FollowUp | None:
    """The shards' follow-ups as one: each shard followed its own screen up within its own
    budget; the merged report adds them up (None: the design has none)."""
    got = [f for f in parts if f is not None]
    if not got:
        return None
    return FollowUp(
        share=got[0].share,
        budget=sum(f.budget for f in got),
        spent=sum(f.spent for f in got),
        rounds={k: v for f in got for k, v in f.rounds.items()},
        left=tuple(c for f in got for c in f.left),
        confirm_share=got[0].confirm_share,
    )


def _looks(parts: Sequence[Looks | None]) -> Looks | None:
    """The shards' sequential designs as one: each shard stopped its own cells; the merged
    report adds what they spent up (None: the fixed design)."""
    got = [f for f in parts if f is not None]
    if not got:
        return None
    return dataclasses.replace(
        got[0],
        spent=sum(f.spent for f in got),
        fixed=sum(f.fixed for f in got),
        decided={k: v for f in got for k, v in f.decided.items()},
        engine_open=any(f.engine_open for f in got),
    )


def merge(paths: Sequence[str | Path]) -> tuple[Report, list[str]]:
    """The sealed report of the whole run, and its generations.jsonl lines."""
    if not paths:
        raise ConfigError("merge: give the report folders of every shard")
    shards = sorted((_load(p) for p in paths), key=lambda s: s.info.index or 0)
    _check_same_run(shards)
    _check_complete(shards)
    base, method = shards[0].report, shards[0].report.method
    grid = [Cell.from_id(cid) for cid in shards[0].info.grid or ()]
    beam_widths = list(dict.fromkeys(c.beam_width for c in grid))
    levels, lines = _agreeing(shards, beam_widths)
    by_id = _shard_cells(shards)
    scores = {cell: s for cell in grid for _, _, s in [by_id[cell.id]] if s is not None}
    plan = Plan(
        cells=tuple(grid),
        reference_cells=tuple(Cell(1, w) for w in beam_widths),
        order=shards[0].scores.order,
        seed=method.seed,
        rotation=method.rotation,
    )
    entries = {cell: by_id[cell.id][1] for cell in grid}
    lengths = shards[0].scores.prompt_lengths
    decision = decide(
        grid,
        scores,
        levels,
        {cell: plan.shortfall(cell, lengths) for cell in scores},
        base.limits,
        design=grid,
        tolerance=method.tolerance,
        alpha=final_alpha(method),
        deterministic=method.deterministic,
        checks={c: e.limit_checks for c, e in entries.items()},
        errors={c: e.error for c, e in entries.items() if e.error is not None},
        notices={c: e.notice for c, e in entries.items()},
        follows_up=method.follow_up is not None,
        flights=Flights(share=method.schedule_share or 0.0),  # the shards' (their run's design)
    )
    followed = _follow_ups([s.report.method.follow_up for s in shards])
    looked = _looks([s.report.method.sequential for s in shards])
    decision = with_open_engine(decision, looked)
    results = decision.cells
    cells = []
    for result in results:
        worst, (shard, _, _) = worst_position(result), by_id[result.id]
        examples = () if worst is None else shard.scores.examples.get(result.id, {}).get(worst, ())
        cells.append(reported(result, examples))
    verdict = decision.verdict
    blind = blindness(levels, results, method.tolerance)
    reports = [s.report for s in shards]
    finished = max(r.finished for r in reports)
    report = dataclasses.replace(
        base,
        verdict=verdict,
        started=min(r.started for r in reports),
        finished=finished,
        seconds=max(r.seconds for r in reports),
        signoff=dataclasses.replace(base.signoff, at=finished, verdict=verdict),
        cache=_cache(reports),
        baseline={w: r.baseline[w] for w in beam_widths for r in reports if w in r.baseline},
        goldens={w: g for r in reports for w, g in r.goldens.items()},
        goldens_written=(),
        method=dataclasses.replace(
            method,
            sequences=looked.spent if looked else plan.sequences() + (followed.spent if followed else 0),
            follow_up=followed,
            sequential=looked,
            questions=questions(
                method.deterministic, any(p.quality is not None for c in results for p in c.positions), blind
            ),
            blind=blind,
            family=decision.family,
            engine_share=decision.engine_share,
            schedule_share=decision.schedule_share,
        ),
        options={**base.options, "shard": None},
        timing=_timing([r.timing for r in reports]),
        cells=tuple(cells),
        boundaries=decision.boundaries,
        engine_wide=reported_engine(decision.engine_wide),
        scores=None,
        shard=ShardInfo(count=len(shards), merged_from=tuple(str(s.folder) for s in shards)),
    )
    order = plan.all_cells  # as the unsharded run wrote generations.jsonl
    return seal(report), [line for c in order for line in lines.get(c.id, [])]


def default_output(first: Path) -> Path:
    """A new ``merged-<time>`` folder next to the first shard's report folder."""
    stem = f"merged-{dt.datetime.now():%Y%m%d-%H%M%S}"
    for i in range(1000):
        path = first.parent / (stem if i == 0 else f"{stem}-{i}")
        if not path.exists():
            return path
    raise ConfigError(f"{first.parent}: too many merged reports this second")


def prepare_output(path: Path) -> Path:
    """Create the output folder; refuse one that already holds files."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConfigError(f"--output {path}: exists and is not an empty folder; give a new folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"--output {path}: cannot create ({exc.strerror}); choose a writable folder"
        ) from None
    return path
