"""report.json, report.md and generations.jsonl for one run."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Any

from harness import __version__
from harness.analysis import ranges
from harness.goldens import atomic_write_text
from harness.pipeline import RunResult

SCHEMA_VERSION = 1


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


def report_dict(result: RunResult) -> dict[str, Any]:
    """The report.json document."""
    import torch
    import transformers

    cells = []
    for c in result.cells:
        a = c.analysis
        cells.append({
            "id": c.cell.id,
            "batch_size": c.cell.batch_size,
            "beam_width": c.cell.beam_width,
            "verdict": c.verdict,
            "limits_verdict": "fail" if c.limit_failures else "pass",
            "error": c.error,
            "message": c.error or (a.message if a else ""),
            "baseline_level": _round(a.level) if a else None,
            "degraded_positions": list(a.degraded_positions) if a else [],
            "positions": [{
                "position": s.position, "rouge_l": _round(s.rouge_l),
                "rouge_l_reference": _round(s.rouge_l_reference), "drop": _round(s.drop),
                "p_value": _round(s.p_value, 12), "p_adjusted": _round(s.p_adjusted, 12),
                "n": s.n, "degraded": s.degraded} for s in (a.positions if a else ())],
            "limit_checks": [ch.as_dict() for ch in c.checks],
        })
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": result.verdict,
        "started": result.started,
        "seconds": round(result.seconds, 2),
        "harness_version": __version__,
        "engine": {"path": result.engine.path, "backend": result.engine.backend,
                   "identity": result.engine.identity, "details": result.engine.details},
        "limits": result.limits.as_dict() if result.limits else None,
        "memory": [m.as_dict() for m in result.memory],
        "dataset": {"name": result.dataset.name, "path": result.dataset.path,
                    "count": len(result.dataset), "hash": result.dataset.hash},
        "baseline": {str(w): name for w, name in result.baseline.items()},
        "goldens_written": list(result.goldens_written),
        "method": {"tolerance": result.config.tolerance, "alpha": result.config.alpha,
                   "test": "one-sided paired t-test of the drop below batch size 1, "
                           "Holm-corrected over all positions tested",
                   "plan": "cyclic rotation: every prompt at every position once per cell",
                   "seed": result.plan.seed, "sequences": result.plan.sequences()},
        "options": result.config.as_dict(),
        "environment": {"python": sys.version.split()[0], "platform": platform.platform(),
                        "torch": torch.__version__, "transformers": transformers.__version__},
        "cells": cells,
    }


def markdown(report: dict[str, Any]) -> str:
    """report.md: verdict, per-cell position table, diagnosis."""
    lines = [f"# Batch-position report: **{report['verdict'].upper()}**", ""]
    eng, ds, lim = report["engine"], report["dataset"], report["limits"] or {}
    lines += [f"- Engine: `{eng['path']}` ({eng['backend']}, {eng['identity'][:19]})",
              f"- Dataset: {ds['name']}, {ds['count']} prompts, hash `{ds['hash'][:12]}`",
              f"- Build limits: max_batch_size {lim.get('max_batch_size')}, max_beam_width "
              f"{lim.get('max_beam_width')}, max_input_len {lim.get('max_input_len')}, "
              f"max_seq_len {lim.get('max_seq_len')}",
              *[f"- Memory per GPU: {m['message']}" for m in report["memory"]],
              "- Baseline: " + "; ".join(f"beam {w}: {n}" for w, n in report["baseline"].items()),
              f"- Method: tolerance {report['method']['tolerance']}, alpha "
              f"{report['method']['alpha']}, seed {report['method']['seed']}", ""]
    lines += ["## Findings", ""]
    for c in report["cells"]:
        if c["verdict"] != "pass":
            lines.append(f"- **{c['id']}**: {c['message']}")
        for ch in c["limit_checks"]:
            if ch["status"] == "fail":
                lines.append(f"- **{c['id']}** build limit: {ch['message']}")
    if lines[-1] == "":
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
    return "\n".join(lines) + "\n"


def write_report(result: RunResult, folder: Path) -> dict[str, Path]:
    """Write the three files atomically; returns their paths."""
    report = report_dict(result)
    paths = {"json": folder / "report.json", "md": folder / "report.md",
             "generations": folder / "generations.jsonl"}
    rows = []
    docs = result.dataset.documents
    for out in result.outputs:
        for position, texts in enumerate(out.texts):
            for i, text in enumerate(texts):
                rows.append(json.dumps({"cell": out.cell.id, "position": position,
                                        "id": docs[i].id, "output": text}, ensure_ascii=False))
    atomic_write_text(paths["generations"], "\n".join(rows) + "\n")
    atomic_write_text(paths["md"], markdown(report))
    atomic_write_text(paths["json"], json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return paths
