"""report.md: verdict, findings, per-cell position tables and sign-off; fits a pull-request
comment."""

from __future__ import annotations

import json
from collections.abc import Callable

from harness.results import CellEntry, PositionEntry, Report
from harness.verdict.statistics import ranges


def _per_position(report: Report) -> str:
    """The range of prompts per position over the cells under test (sparse runs)."""
    ns = [p.n for c in report.cells if c.batch_size > 1 for p in c.positions]
    if not ns:
        return "?"
    return str(min(ns)) if min(ns) == max(ns) else f"{min(ns)}-{max(ns)}"


def _fields(report: Report) -> str:
    """--request-field as given: KEY=VALUE, VALUE as JSON."""
    return ", ".join(f"`{k}={json.dumps(v, ensure_ascii=False)}`"
                     for k, v in report.options["request_fields"].items())


def _header(report: Report) -> list[str]:
    eng, ds, lim, cache, method = (report.engine, report.dataset, report.limits, report.cache,
                                   report.method)
    semantics = (eng.details or {}).get("position_semantics")
    lines = [f"- Engine: `{eng.path}` ({eng.backend}, {eng.identity})",
             *([f"- Batch position: {semantics}"] if semantics else []),
             f"- Dataset: {ds.name}, {ds.count} prompts, hash `{ds.hash[:12]}`"
             + (f" (subset of {ds.subset.of}, seed {ds.subset.seed})" if ds.subset else ""),
             f"- Build limits: max_batch_size {lim.max_batch_size}, max_beam_width "
             f"{lim.max_beam_width}, max_input_len {lim.max_input_len}, max_seq_len "
             f"{lim.max_seq_len}" if lim else "- Build limits: the engine records no build limits, "
             "so none were checked.",
             *([f"- Request fields sent with every request: {_fields(report)}"]
               if report.options.get("request_fields") else []),
             *[f"- Memory per GPU: {m.message}" for m in report.memory],
             "- Baseline: " + "; ".join(f"beam {w}: {n}" for w, n in report.baseline.items()),
             f"- Generation cache: {cache.reason}, {cache.generations_from_cache} generations from "
             f"the cache, {cache.batches_generated} batches generated",
             f"- Method: tolerance {method.tolerance}, alpha {method.alpha}, seed {method.seed}, "
             + (f"sparse rotation (each prompt at one position per cell: {_per_position(report)} "
                "prompts per position)" if method.rotation == "sparse" else "full rotation")]
    shard = report.shard
    if shard is not None and shard.index:
        lines.append(f"- Shard {shard.index}/{shard.count}: cells {', '.join(shard.cells or ())}; "
                     "verdict of this shard alone (Holm over its positions); "
                     "`python -m harness merge` of all shards gives the run's")
    elif shard is not None and shard.merged_from:
        lines.append(f"- Merged from {shard.count} shard reports")
    return lines


def _findings(report: Report) -> list[str]:
    lines = []
    for c in report.cells:
        if c.verdict != "pass":
            lines.append(f"- **{c.id}**: {c.message}" + (f" — {c.cause}" if c.cause else ""))
        lines += [f"- **{c.id}** build limit: {ch.message}" for ch in c.limit_checks
                  if ch.status == "fail"]
    return lines or ["No degraded position and no exceeded build limit."]


def _table(cells: tuple[CellEntry, ...], value: Callable[[PositionEntry], str],
           verdict: bool) -> list[str]:
    width = max((len(c.positions) for c in cells), default=1)
    head = "| cell | " + ("verdict | " if verdict else "")
    lines = [head + " | ".join(str(p) for p in range(width)) + " |",
             "|---|" + ("---|" if verdict else "") + "---|" * width]
    for c in cells:
        vals = [value(p) for p in c.positions] + [""] * (width - len(c.positions))
        lines.append(f"| {c.id} | " + (f"{c.verdict} | " if verdict else "") + " | ".join(vals) + " |")
    return lines


def markdown(report: Report) -> str:
    """The whole report.md."""
    lines = [f"# Batch-position report: **{str(report.verdict).upper()}**", "", *_header(report),
             "", "## Findings", "", *_findings(report),
             "", "## ROUGE-L by batch position (vs baseline; * = degraded)", "",
             *_table(report.cells, lambda p: f"{'*' if p.degraded else ''}{p.rouge_l:.2f}", True),
             "", "## ROUGE-L against the reference summaries", "",
             *_table(report.cells, lambda p: f"{p.rouge_l_reference:.2f}", False)]
    degraded = [c for c in report.cells if c.degraded_positions]
    if degraded:
        lines += ["", "Degraded positions (0-indexed): " + "; ".join(
            f"{c.id} {ranges(c.degraded_positions)}" for c in degraded)]
    s = report.signoff
    sha = report.integrity.sha256 if report.integrity else ""
    lines += ["", "## Sign-off", "",
              f"{str(s.verdict).upper()} for `{s.engine}` ({s.identity}) at {s.at}, "
              f"run by {s.by or '(no --signoff-by given)'}; report sha256 `{sha}`"]
    return "\n".join(lines) + "\n"
