"""report.json (versioned, self-hashed), report.md, report.html and generations.jsonl."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import __version__
from harness.inputs.data import build_prompt
from harness.pipeline import CellResult, RunResult
from harness.report.provenance import engine_files, environment
from harness.storage.atomic import atomic_write_text
from harness.verdict.failures import likely_cause
from harness.verdict.statistics import ranges

SCHEMA_VERSION = 1
EXAMPLES_PER_CELL = 3
PROMPT_CHARS = 600


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


def canonical_hash(report: dict[str, Any]) -> str:
    """sha256 of the report without its ``integrity`` block, keys sorted, compact."""
    body = {k: v for k, v in report.items() if k != "integrity"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def verify(report: dict[str, Any]) -> bool:
    """True when the report is exactly as written (its recorded hash still matches)."""
    recorded = (report.get("integrity") or {}).get("sha256")
    return recorded == canonical_hash(report)


def worst_position(c: CellResult) -> int | None:
    """The degraded position with the lowest ROUGE-L (the one the examples show)."""
    a = c.analysis
    if a is None or not a.degraded_positions:
        return None
    return min(a.degraded_positions, key=lambda p: a.positions[p].rouge_l)


def _examples(result: RunResult, cell_index: int) -> list[dict[str, Any]]:
    """A few prompts at the worst degraded position: prompt, baseline and damaged output."""
    c = result.cells[cell_index]
    worst = worst_position(c)
    return [] if worst is None else _examples_at(result, c, worst)


def _examples_at(result: RunResult, c: CellResult, worst: int) -> list[dict[str, Any]]:
    outputs = {o.cell: o for o in result.outputs}.get(c.cell)
    base = result.baseline_texts.get(c.cell.beam_width)
    if outputs is None or base is None:
        return []
    docs = result.dataset.documents
    picks = []
    for i in range(len(docs)):
        if outputs.texts[worst][i] is not None and outputs.texts[worst][i] != base[i]:
            picks.append(i)
        if len(picks) == EXAMPLES_PER_CELL:
            break
    def prompt(i: int) -> str:
        if result.prompts:
            return result.prompts[i]
        return build_prompt(result.config.prompt_template, docs[i])

    return [{"position": worst, "id": docs[i].id, "prompt": prompt(i)[:PROMPT_CHARS],
             "baseline": base[i], "output": outputs.texts[worst][i]} for i in picks]


def cell_dict(c: CellResult, examples: list[dict[str, Any]]) -> dict[str, Any]:
    """One entry of report.json's ``cells`` (shared with ``merge``)."""
    a = c.analysis
    return {
        "id": c.cell.id,
        "batch_size": c.cell.batch_size,
        "beam_width": c.cell.beam_width,
        "verdict": c.verdict,
        "limits_verdict": "fail" if c.limit_failures else "pass",
        "error": c.error,
        "message": c.error or (a.message if a else ""),
        "cause": likely_cause(c),
        "pattern": c.finding.kind if c.finding else None,
        "baseline_level": _round(a.level) if a else None,
        "degraded_positions": list(a.degraded_positions) if a else [],
        "omnibus": ({"drop": _round(a.cell_drop), "p_adjusted": _round(a.cell_p_adjusted, 12),
                     "failed": a.spread} if a and a.cell_drop is not None else None),
        "positions": [{
            "position": s.position, "rouge_l": _round(s.rouge_l),
            "ci_low": _round(s.ci_low), "ci_high": _round(s.ci_high),
            "rouge_l_reference": _round(s.rouge_l_reference), "drop": _round(s.drop),
            "p_value": _round(s.p_value, 12), "p_adjusted": _round(s.p_adjusted, 12),
            "n": s.n, "degraded": s.degraded} for s in (a.positions if a else ())],
        "limit_checks": [ch.as_dict() for ch in c.checks],
        "examples": examples,
    }


def _per_position(report: dict[str, Any]) -> str:
    """The range of prompts per position over the cells under test (sparse runs)."""
    ns = [p["n"] for c in report["cells"] if c["batch_size"] > 1 for p in c["positions"]]
    if not ns:
        return "?"
    return str(min(ns)) if min(ns) == max(ns) else f"{min(ns)}-{max(ns)}"


def _nulls(row: Sequence[float]) -> list[float | None]:
    """JSON has no NaN: a prompt that never sat at a position (sparse) is null."""
    return [None if math.isnan(x) else x for x in row]


def _shard_blocks(result: RunResult) -> dict[str, Any]:
    """For --shard runs: which cells this shard ran, and what ``merge`` needs to analyse the
    union as one run: per-prompt scores (unrounded), batch size 1's levels, the prompt
    order and lengths the fault signatures use, and the examples of every degraded position
    (Holm over more tests can only clear positions, never add them, so the worst merged
    position is always among them)."""
    if not result.config.shard:
        return {}
    k, n = result.config.shard
    by_cell = {c.cell: c for c in result.cells}
    scored = {}
    for cs in result.scores:
        c = by_cell[cs.cell]
        examples = {str(p): _examples_at(result, c, p)
                    for p in (c.analysis.degraded_positions if c.analysis else ())}
        scored[cs.cell.id] = {"baseline": [_nulls(row) for row in cs.baseline],
                              "reference": [_nulls(row) for row in cs.reference],
                              "examples": examples}
    return {
        "shard": {"index": k, "count": n, "cells": [c.cell.id for c in result.cells],
                  "grid": [c.id for c in result.grid]},
        "scores": {"levels": {str(w): list(v) for w, v in result.levels.items()},
                   "order": list(result.plan.order), "prompt_lengths": list(result.prompt_lengths),
                   "cells": scored},
    }


def report_dict(result: RunResult) -> dict[str, Any]:
    """The report.json document (see report.schema.json)."""
    cells = [cell_dict(c, _examples(result, index)) for index, c in enumerate(result.cells)]
    goldens = {}
    for w, path in result.goldens_paths.items():
        file = Path(path)
        goldens[str(w)] = {"path": path, "sha256": hashlib.sha256(file.read_bytes()).hexdigest()
                           if file.is_file() else None}
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "verdict": result.verdict,
        "started": result.started,
        "finished": result.finished,
        "seconds": round(result.seconds, 2),
        "harness_version": __version__,
        "signoff": {"by": result.config.signoff_by, "at": result.finished,
                    "engine": result.engine.path, "identity": result.engine.identity,
                    "verdict": result.verdict},
        "engine": {"path": result.engine.path, "backend": result.engine.backend,
                   "identity": result.engine.identity, "details": result.engine.details,
                   "files": engine_files(result.engine.path)},
        "limits": result.limits.as_dict() if result.limits else None,
        "memory": [m.as_dict() for m in result.memory],
        "cache": result.cache,
        "dataset": result.dataset.describe(),
        "ranks": {"world_size": result.ranks.world, "source": result.ranks.source},
        "baseline": {str(w): name for w, name in result.baseline.items()},
        "goldens": goldens,
        "goldens_written": list(result.goldens_written),
        "method": {"tolerance": result.config.tolerance, "alpha": result.config.alpha,
                   "test": "one-sided paired t-test of the drop below batch size 1 against "
                           "the tolerance, per position and per cell (mean over positions), "
                           "Holm-corrected over all tests of the run (docs/method.md)",
                   "plan": ("cyclic rotation: every prompt at every position once per cell"
                            if result.plan.rotation == "full" else
                            "sparse rotation: every prompt at one position per cell"),
                   "rotation": result.plan.rotation,
                   "seed": result.plan.seed, "sequences": result.plan.sequences()},
        "options": result.config.as_dict(),
        "environment": environment(),
        "timing": result.timing,
        "cells": cells,
        **_shard_blocks(result),
    }
    return seal(report)


def seal(report: dict[str, Any]) -> dict[str, Any]:
    """Add (or renew) the ``integrity`` block; last step before writing."""
    report = {k: v for k, v in report.items() if k != "integrity"}
    report["integrity"] = {"sha256": canonical_hash(report),
                           "method": "sha256 of this JSON without 'integrity', keys sorted, "
                                     "separators (',', ':'), UTF-8"}
    return report


def markdown(report: dict[str, Any]) -> str:
    """report.md: verdict, per-cell position table, diagnosis; fits a pull-request comment."""
    lines = [f"# Batch-position report: **{report['verdict'].upper()}**", ""]
    eng, ds, lim = report["engine"], report["dataset"], report["limits"] or {}
    semantics = (eng.get("details") or {}).get("position_semantics")
    lines += [f"- Engine: `{eng['path']}` ({eng['backend']}, {eng['identity'][:19]})",
              *([f"- Batch position: {semantics}"] if semantics else []),
              f"- Dataset: {ds['name']}, {ds['count']} prompts, hash `{ds['hash'][:12]}`"
              + (f" (subset of {ds['subset']['of']}, seed {ds['subset']['seed']})"
                 if ds.get("subset") else ""),
              f"- Build limits: max_batch_size {lim.get('max_batch_size')}, max_beam_width "
              f"{lim.get('max_beam_width')}, max_input_len {lim.get('max_input_len')}, "
              f"max_seq_len {lim.get('max_seq_len')}",
              *[f"- Memory per GPU: {m['message']}" for m in report["memory"]],
              "- Baseline: " + "; ".join(f"beam {w}: {n}" for w, n in report["baseline"].items()),
              f"- Generation cache: {report['cache'].get('reason', 'off')}, "
              f"{report['cache'].get('generations_from_cache', 0)} generations from the cache, "
              f"{report['cache'].get('batches_generated', 0)} batches generated",
              f"- Method: tolerance {report['method']['tolerance']}, alpha "
              f"{report['method']['alpha']}, seed {report['method']['seed']}, "
              + (f"sparse rotation (each prompt at one position per cell: "
                 f"{_per_position(report)} prompts per position)"
                 if report['method'].get('rotation') == 'sparse' else "full rotation")]
    shard = report.get("shard") or {}
    if shard.get("index"):
        lines.append(f"- Shard {shard['index']}/{shard['count']}: cells {', '.join(shard['cells'])}; "
                     "verdict of this shard alone (Holm over its positions); "
                     "`python -m harness merge` of all shards gives the run's")
    elif shard.get("merged_from"):
        lines.append(f"- Merged from {shard['count']} shard reports")
    lines += ["", "## Findings", ""]
    findings = 0
    for c in report["cells"]:
        if c["verdict"] != "pass":
            lines.append(f"- **{c['id']}**: {c['message']}" + (f" — {c['cause']}" if c["cause"] else ""))
            findings += 1
        for ch in c["limit_checks"]:
            if ch["status"] == "fail":
                lines.append(f"- **{c['id']}** build limit: {ch['message']}")
                findings += 1
    if not findings:
        lines.append("No degraded position and no exceeded build limit.")
    lines += ["", "## ROUGE-L by batch position (vs baseline; * = degraded)", ""]
    width = max((len(c["positions"]) for c in report["cells"]), default=1)
    lines.append("| cell | verdict | " + " | ".join(str(p) for p in range(width)) + " |")
    lines.append("|---|---|" + "---|" * width)
    for c in report["cells"]:
        vals = [f"{'*' if p['degraded'] else ''}{p['rouge_l']:.2f}" for p in c["positions"]]
        vals += [""] * (width - len(vals))
        lines.append(f"| {c['id']} | {c['verdict']} | " + " | ".join(vals) + " |")
    lines += ["", "## ROUGE-L against the reference summaries", ""]
    lines.append("| cell | " + " | ".join(str(p) for p in range(width)) + " |")
    lines.append("|---|" + "---|" * width)
    for c in report["cells"]:
        vals = [f"{p['rouge_l_reference']:.2f}" for p in c["positions"]]
        vals += [""] * (width - len(vals))
        lines.append(f"| {c['id']} | " + " | ".join(vals) + " |")
    degraded = [c for c in report["cells"] if c["degraded_positions"]]
    if degraded:
        lines += ["", "Degraded positions (0-indexed): " + "; ".join(
            f"{c['id']} {ranges(c['degraded_positions'])}" for c in degraded)]
    s = report["signoff"]
    lines += ["", "## Sign-off", "",
              f"{s['verdict'].upper()} for `{s['engine']}` ({s['identity'][:19]}) at {s['at']}, "
              f"run by {s['by'] or '(no --signoff-by given)'}; report sha256 "
              f"`{report['integrity']['sha256']}`"]
    return "\n".join(lines) + "\n"


def write_report(result: RunResult, folder: Path) -> dict[str, Path]:
    """Write every file atomically (generations.jsonl only where the pipeline did not stream
    it already); report.json last, so its presence means a whole report."""
    rows: list[str] | None = None
    if not (folder / "generations.jsonl").exists():  # the pipeline streams it as cells complete
        rows = []
        docs = result.dataset.documents
        for out in result.outputs:
            for position, texts in enumerate(out.texts):
                for i, text in enumerate(texts):
                    if text is None:  # never sat there (--rotation sparse)
                        continue
                    row: dict[str, Any] = {"cell": out.cell.id, "position": position,
                                           "id": docs[i].id, "output": text}
                    if out.beams and out.beams[position][i] is not None:
                        row["beams"] = list(out.beams[position][i])  # type: ignore[arg-type]
                    rows.append(json.dumps(row, ensure_ascii=False))
    return write_files(report_dict(result), rows, folder)


def write_files(report: dict[str, Any], generation_rows: list[str] | None, folder: Path
                ) -> dict[str, Path]:
    """generations.jsonl (unless None: already written), report.md, report.html, then
    report.json (of a sealed report)."""
    from harness.report.html import render_report

    paths = {"generations": folder / "generations.jsonl", "md": folder / "report.md",
             "html": folder / "report.html", "json": folder / "report.json"}
    if generation_rows is not None:
        atomic_write_text(paths["generations"], "\n".join(generation_rows) + "\n")
    atomic_write_text(paths["md"], markdown(report))
    atomic_write_text(paths["html"], render_report(report))
    atomic_write_text(paths["json"], json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return paths
