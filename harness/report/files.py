"""The report stage's second half: a Report written as files beside the run's
generations.jsonl (which the generate stage streams cell by cell).

Every file is written atomically; report.json goes last, so its presence means a whole report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from harness.model.report import Report
from harness.report.html import render_report
from harness.report.markdown import markdown
from harness.report.serialize import to_json
from harness.storage.atomic import atomic_write_text, disk_errors
from harness.storage.generations import stored_line


def write_files(report: Report, rows: Iterable[str] | None, folder: Path) -> dict[str, Path]:
    """generations.jsonl (unless None: already written), report.md, report.html, then
    report.json. ``report`` is sealed, so its outside text is already clean
    (``harness.report.serialize.seal``)."""
    paths = {
        "generations": folder / "generations.jsonl",
        "md": folder / "report.md",
        "html": folder / "report.html",
        "json": folder / "report.json",
    }
    if rows is not None:  # merge: its shards' rows, as the run that wrote them stored them
        atomic_write_text(paths["generations"], "\n".join(map(stored_line, rows)) + "\n", root=folder)
    atomic_write_text(paths["md"], markdown(report), root=folder)
    atomic_write_text(paths["html"], render_report(report), root=folder)
    atomic_write_text(
        paths["json"], json.dumps(to_json(report), indent=2, ensure_ascii=False) + "\n", root=folder
    )
    return paths


def write_report(report: Report, folder: Path) -> Report:
    """Write the report of a run beside its generations.jsonl; a full disk is one line
    naming the folder."""
    with disk_errors(
        f"--report-dir {folder}",
        "the generation cache keeps every generated batch "
        "(unless --no-cache): free space or choose another --report-dir and rerun; "
        "the rerun reads the batches from the cache",
    ):
        write_files(report, None, folder)
    return report
