"""report.json: the measurement model's ``Report`` (harness.model.report: what the report
stage builds from a run and every writer, ``compare`` and ``merge`` read; schema in
report.schema.json) serialized as it is, and sealed by a sha256 over its content.

``load_report`` reads report.json back into the same types (pydantic validates it against
the model's dataclasses), so a damaged or foreign file is one error naming the file and the
field, never a KeyError deep inside a writer.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from harness import bounds
from harness.errors import ConfigError
from harness.model.report import SCHEMA_VERSION, Integrity, Report
from harness.outside import cleaned


@dataclass(frozen=True)
class LoadedReport:
    """A report read from disk: where from, and whether it is still as its run wrote it."""

    report: Report
    path: Path
    intact: bool


@cache
def _adapter() -> TypeAdapter[Report]:
    return TypeAdapter(Report)


OPTIONAL_BLOCKS = ("shard", "scores")  # absent from report.json unless the run has them


def to_json(report: Report) -> dict[str, Any]:
    """The report.json document (blocks a run does not have are left out)."""
    data: dict[str, Any] = _adapter().dump_python(report, mode="json")
    for key in (*OPTIONAL_BLOCKS, "integrity"):
        if data.get(key) is None:
            data.pop(key, None)
    if data.get("timing", {}).get("merged_shards") is None:
        data["timing"].pop("merged_shards", None)
    if data.get("shard") is not None:
        data["shard"] = {k: v for k, v in data["shard"].items() if v is not None}
    return data


def canonical_hash(report: dict[str, Any]) -> str:
    """sha256 of the report without its ``integrity`` block, keys sorted, compact."""
    body = {k: v for k, v in report.items() if k != "integrity"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def verify(report: dict[str, Any]) -> bool:
    """True when the report.json document is exactly as written (its hash still matches)."""
    integrity = report.get("integrity")
    recorded = integrity.get("sha256") if isinstance(integrity, dict) else None
    return recorded == canonical_hash(report)


def seal(report: Report) -> Report:
    """The report with its outside text cleaned (``harness.outside``: secrets redacted, control
    characters escaped, in every string of it) and its ``integrity`` block (re)computed; the
    last step before writing, so report.json, report.md, report.html and the terminal summary
    all show the one clean report."""
    report = cleaned(replace(report, integrity=None))
    body = to_json(report)
    return replace(report, integrity=Integrity(sha256=canonical_hash(body)))


def _where(error: ValidationError) -> str:
    first = error.errors()[0]
    path = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return f"{path}: {first['msg']}"


def from_json(data: Any, source: str = "report.json") -> Report:
    """A report.json document as a Report; ConfigError naming the first bad field."""
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else None
        raise ConfigError(f"{source}: report schema_version {found!r}; this harness reads "
                          f"version {SCHEMA_VERSION}")
    try:
        return _adapter().validate_python(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: not a report this harness can read ({_where(exc)}); give "
                          "the report.json a run wrote") from None


def load_report(path: str | Path) -> LoadedReport:
    """report.json from a report folder or the file itself, read through the schema."""
    p = Path(path)
    file = p / "report.json" if p.is_dir() else p
    if not file.is_file():
        raise ConfigError(f"{path}: no report.json there; give a report folder or a report.json")
    try:
        data = bounds.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # unreadable, undecodable, invalid, nested too deep
        raise ConfigError(f"{file}: not a readable report ({type(exc).__name__}: {exc})") from None
    # shown by compare and merge: outside text, cleaned as a run's own report is when sealed
    return LoadedReport(report=cleaned(from_json(data, str(file))), path=file,
                        intact=isinstance(data, dict) and verify(data))
