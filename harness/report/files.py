"""The report stage's second half: a Report and its generations written as files.

Every file is written atomically; report.json goes last, so its presence means a whole report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from harness.report.build import build_report
from harness.report.html import render_report
from harness.report.markdown import markdown
from harness.report.model import to_json
from harness.results import Report, RunResult
from harness.storage.atomic import atomic_write_text, disk_errors


def generation_rows(result: RunResult) -> list[str]:
    """generations.jsonl rows of a run whose outputs were kept in memory (not streamed)."""
    rows: list[str] = []
    docs = result.dataset.documents
    for out in result.outputs:
        whole = getattr(out.texts, "whole", out.texts)  # as generated, not cut for scoring
        for position, texts in enumerate(whole):
            for i, text in enumerate(texts):
                if text is None:  # never sat there (--rotation sparse)
                    continue
                row: dict[str, object] = {"cell": out.cell.id, "position": position,
                                          "id": docs[i].id, "output": text}
                if out.beams and out.beams[position][i] is not None:
                    row["beams"] = list(out.beams[position][i])  # type: ignore[arg-type]
                rows.append(json.dumps(row, ensure_ascii=False))
    return rows


def write_files(report: Report, rows: Iterable[str] | None, folder: Path) -> dict[str, Path]:
    """generations.jsonl (unless None: already written), report.md, report.html, then
    report.json."""
    paths = {"generations": folder / "generations.jsonl", "md": folder / "report.md",
             "html": folder / "report.html", "json": folder / "report.json"}
    if rows is not None:
        atomic_write_text(paths["generations"], "\n".join(rows) + "\n")
    atomic_write_text(paths["md"], markdown(report))
    atomic_write_text(paths["html"], render_report(report))
    atomic_write_text(paths["json"], json.dumps(to_json(report), indent=2, ensure_ascii=False) + "\n")
    return paths


def write_report(result: RunResult, folder: Path) -> Report:
    """Build and write the report of a run (generations.jsonl only where the run did not
    stream it already); a full disk is one line naming the folder."""
    report = build_report(result)
    streamed = (folder / "generations.jsonl").exists()
    with disk_errors(f"--report-dir {folder}", "the generation cache keeps every generated batch "
                     "(unless --no-cache): free space or choose another --report-dir and rerun; "
                     "the rerun reads the batches from the cache"):
        write_files(report, None if streamed else generation_rows(result), folder)
    return report
