"""``merge SHARD...``: the reports of ``--shard K/N`` runs combined into one unsharded report.

Holm's correction spans every test of a run, and the fault signatures compare cells with
each other, so a shard's own verdict is not the run's: merge re-runs
``harness.verdict.statistics.analyze`` and the signature match over the union of the shards'
per-prompt scores (report.json's ``scores`` block) and rebuilds each cell's entry with the
writer's own code. The result equals the report of the same run without ``--shard`` (cells,
positions, p-values, causes, verdict), provided the engine gives the same batch-size-1
outputs in every shard, which merge checks.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.limits.engine_config import EngineLimits
from harness.limits.preflight import LimitCheck
from harness.pipeline import CellResult, match_findings
from harness.plan import Cell, Plan
from harness.report.compare import load_report
from harness.report.writer import cell_dict, seal, verify, worst_position
from harness.verdict.statistics import CellScores, analyze

# Options that do not change what a run measures (paths differ between CI jobs; the engine's
# and the dataset's contents are compared by hash instead): shards may differ in them.
FREE_OPTIONS = {"shard", "report_dir", "cache_dir", "no_cache", "engine", "dataset", "goldens_dir",
                "signoff_by"}


def _cell(cell_id: str) -> Cell:
    bs, beam = cell_id.removeprefix("bs").split("-beam")
    return Cell(int(bs), int(beam))


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _load(path: str | Path) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    """(folder, report.json, generations.jsonl rows) of one shard report, checked."""
    report = load_report(path)
    file = Path(report.pop("_path"))
    folder = file.parent
    if not verify(report):
        raise ConfigError(f"{file}: changed after it was written (its sha256 no longer matches); "
                          "merge only shard reports as the runs wrote them")
    shard = report.get("shard")
    if not isinstance(shard, dict) or "index" not in shard or "scores" not in report:
        raise ConfigError(f"{file}: not a shard report; merge combines the reports of runs "
                          "made with --shard K/N")
    gens = folder / "generations.jsonl"
    try:
        rows = [json.loads(line) for line in gens.read_text(encoding="utf-8").splitlines() if line]
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{gens}: cannot read the shard's generations ({exc}); merge needs the "
                          "whole report folder") from None
    return folder, report, rows


def _settings(report: dict[str, Any]) -> dict[str, Any]:
    """What must be equal in every shard of one run, by the name a user knows it by."""
    out: dict[str, Any] = {_flag(k): v for k, v in report["options"].items() if k not in FREE_OPTIONS}
    eng = report["engine"]
    out["engine"] = (eng["backend"], eng["identity"],
                     sorted((f["name"], f["sha256"]) for f in eng.get("files", [])))
    out["engine limits"] = report["limits"]
    out["dataset"] = report["dataset"]["hash"]
    out["harness version"] = report["harness_version"]
    out["shard count"] = report["shard"]["count"]
    out["cell grid"] = report["shard"]["grid"]
    out["prompt order"] = report["scores"].get("order")
    out["prompt lengths"] = report["scores"].get("prompt_lengths")
    return out


def _check_compatible(loaded: list[tuple[Path, dict[str, Any], list[dict[str, Any]]]]) -> None:
    first_folder, first, _ = loaded[0]
    want = _settings(first)
    for folder, report, _ in loaded[1:]:
        got = _settings(report)
        for key in [*want, *(k for k in got if k not in want)]:  # options first, in order
            if want.get(key) != got.get(key):
                shown = (f" ({want.get(key)!r} vs {got.get(key)!r})"
                         if key.startswith("--") or key == "shard count" else "")
                raise ConfigError(f"{folder} and {first_folder} differ in {key}{shown}: they are "
                                  "not shards of one run; merge only reports of the same engine, "
                                  "dataset and settings")
    count = first["shard"]["count"]
    by_index: dict[int, Path] = {}
    for folder, report, _ in loaded:
        k = report["shard"]["index"]
        if k in by_index:
            raise ConfigError(f"shard {k}/{count} given twice: {by_index[k]} and {folder}")
        by_index[k] = folder
    missing = [k for k in range(1, count + 1) if k not in by_index]
    if missing:
        raise ConfigError(f"shard(s) {', '.join(f'{k}/{count}' for k in missing)} missing: merge "
                          f"needs all {count} shard reports of the run")
    owner: dict[str, Path] = {}
    for folder, report, _ in loaded:
        for cid in report["shard"]["cells"]:
            if cid in owner:
                raise ConfigError(f"cell {cid} is in both {owner[cid]} and {folder}: the shards "
                                  "overlap; merge reports of one --shard K/N split")
            owner[cid] = folder
    lost = [cid for cid in first["shard"]["grid"] if cid not in owner]
    if lost:
        raise ConfigError(f"cell(s) {', '.join(lost)} are in no shard report: the shards do not "
                          "cover the grid")


def _agreeing(loaded: list[tuple[Path, dict[str, Any], list[dict[str, Any]]]], beam_widths: list[int]
              ) -> tuple[dict[int, tuple[float, ...]], dict[str, list[dict[str, Any]]]]:
    """Batch size 1's levels and generation rows by cell, checked equal across shards."""
    levels: dict[int, tuple[float, ...]] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    seen: dict[str, Path] = {}
    for folder, report, shard_rows in loaded:
        for w, values in report["scores"]["levels"].items():
            if levels.setdefault(int(w), tuple(values)) != tuple(values):
                raise ConfigError(f"{folder}: batch size 1 scores against the baseline of beam "
                                  f"width {w} differ from another shard's; the shards' baselines "
                                  "differ, rerun them with one shared --cache-dir or with goldens")
        mine: dict[str, list[dict[str, Any]]] = {}
        for row in shard_rows:
            mine.setdefault(row["cell"], []).append(row)
        for cid, cell_rows in mine.items():
            if cid in rows and rows[cid] != cell_rows:
                raise ConfigError(
                    f"{folder} and {seen[cid]} hold different outputs for {cid}: the engine did "
                    "not repeat its batch-size-1 outputs across the shard runs, so their baselines "
                    "differ; rerun the shards with one shared --cache-dir or with goldens")
            rows.setdefault(cid, cell_rows)
            seen.setdefault(cid, folder)
    order = sorted(levels, key=lambda w: beam_widths.index(w) if w in beam_widths else w)
    return {w: levels[w] for w in order}, rows


def _nans(row: list[float | None]) -> tuple[float, ...]:
    """null in a shard report: the prompt never sat at that position (--rotation sparse)."""
    return tuple(math.nan if x is None else float(x) for x in row)


def merge(paths: Sequence[str | Path]) -> tuple[dict[str, Any], list[str]]:
    """The sealed report.json document of the whole run, and its generations.jsonl lines."""
    if not paths:
        raise ConfigError("merge: give the report folders of every shard")
    loaded = sorted((_load(p) for p in paths), key=lambda t: t[1]["shard"]["index"])
    _check_compatible(loaded)
    base = loaded[0][1]
    options = base["options"]
    beam_widths = list(options["beam_widths"])
    levels, rows = _agreeing(loaded, beam_widths)
    limits = EngineLimits(**base["limits"]) if base["limits"] else None

    shard_cells: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {}
    for folder, report, _ in loaded:
        scored = report["scores"]["cells"]
        for c in report["cells"]:
            if c["id"] not in scored and c["error"] is None:
                raise ConfigError(f"{folder}: report.json has no scores for {c['id']}; the report "
                                  "is damaged, rerun that shard")
            shard_cells[c["id"]] = (c, scored.get(c["id"]))
    grid = [_cell(cid) for cid in base["shard"]["grid"]]
    scores = [CellScores(cell=cell, baseline=tuple(_nans(r) for r in s["baseline"]),
                         reference=tuple(_nans(r) for r in s["reference"]))
              for cell in grid for _, s in [shard_cells[cell.id]] if s is not None]
    analyses = {a.cell: a for a in analyze(scores, levels, tolerance=float(options["tolerance"]),
                                           alpha=float(options["alpha"]))}
    plan = Plan(cells=tuple(grid), reference_cells=tuple(Cell(1, w) for w in beam_widths),
                order=tuple(base["scores"]["order"]), seed=int(options["seed"]),
                rotation=str(options.get("rotation") or "full"))
    findings = match_findings(analyses, {cs.cell: (cs, levels[cs.cell.beam_width])
                                         for cs in scores},
                              plan, base["scores"]["prompt_lengths"], limits)
    cells, results = [], []
    for cell in grid:
        old, scored = shard_cells[cell.id]
        result = CellResult(cell=cell, checks=tuple(LimitCheck(**ch) for ch in old["limit_checks"]),
                            analysis=analyses.get(cell), error=old["error"],
                            finding=findings.get(cell))
        worst = worst_position(result)
        examples = [] if worst is None or scored is None else scored["examples"][str(worst)]
        cells.append(cell_dict(result, examples))
        results.append(result)
    verdict = "fail" if any(r.verdict != "pass" or r.limit_failures for r in results) else "pass"

    reports = [r for _, r, _ in loaded]
    report = dict(base)
    report.pop("scores", None)
    finished = max(r["finished"] for r in reports)
    report.update(
        verdict=verdict, started=min(r["started"] for r in reports), finished=finished,
        seconds=max(float(r.get("seconds", 0.0)) for r in reports),
        signoff={**base["signoff"], "at": finished, "verdict": verdict},
        cache={**base["cache"], **{k: sum(int(r["cache"].get(k, 0)) for r in reports)
                                   for k in ("batches_from_cache", "batches_generated",
                                             "generations_from_cache")}},
        baseline={str(w): name for r in reports for w, name in r["baseline"].items()},
        goldens={w: g for r in reports for w, g in r["goldens"].items()},
        goldens_written=[],
        method={**base["method"], "sequences": plan.sequences()},
        options={**options, "shard": None},
        timing=_timing([r.get("timing") or {} for r in reports]),
        cells=cells,
        shard={"count": len(loaded), "merged_from": [str(f) for f, _, _ in loaded]},
    )
    report["baseline"] = dict(sorted(report["baseline"].items(), key=lambda kv: beam_widths.index(int(kv[0]))
                                     if int(kv[0]) in beam_widths else int(kv[0])))
    refs = [Cell(1, w) for w in beam_widths]
    order = refs + [c for c in grid if c not in refs]  # as the unsharded run's Plan.all_cells
    lines = [json.dumps(row, ensure_ascii=False) for c in order for row in rows.get(c.id, [])]
    return seal(report), lines


def _timing(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Shard timings summed (device time over all shards), and how many were merged."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, bool):
                out[key] = out.get(key, True) and value
            elif isinstance(value, (int, float)):
                out[key] = round(out.get(key, 0) + value, 4)
    out["merged_shards"] = len(parts)
    return out


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
        raise ConfigError(f"--output {path}: cannot create ({exc.strerror}); choose a writable "
                          "folder") from None
    return path


def summary_lines(report: dict[str, Any]) -> list[str]:
    """Per-cell, per-position scores for terminals (as ``run`` prints them)."""
    lines = []
    for c in report["cells"]:
        if c["error"]:
            lines.append(f"{c['id']:>12}  ERROR  {c['error']}")
            continue
        marks = " ".join(f"{'*' if p['degraded'] else ' '}{p['rouge_l']:.2f}" for p in c["positions"])
        lines.append(f"{c['id']:>12}  {c['verdict'].upper():5}  {marks}")
    return lines
