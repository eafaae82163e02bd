"""report.json: the measurement model's ``Report`` (harness.model.report: what the report
stage builds from a run and every writer, ``compare`` and ``merge`` read; schema in
report.schema.json) serialized as it is, and sealed by a sha256 over its content and, when
``HARNESS_SIGNING_KEY`` is set, an HMAC-SHA256 with that key over the same bytes.

What each proves (docs/reliability.md, "What the integrity check proves"): the sha256 is
unkeyed, so it shows that a file was not changed by accident or by someone who did not
recompute it, and nothing about who wrote it; the HMAC shows that the content was written by
someone holding the key. ``check_sealed`` is what ``compare`` and ``merge`` require.

``load_report`` reads report.json back into the same types (pydantic validates it against
the model's dataclasses), so a damaged or foreign file is one error naming the file and the
field, never a KeyError deep inside a writer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from harness import bounds
from harness.errors import ConfigError
from harness.model.json import Json, JsonObject
from harness.model.report import SCHEMA_VERSION, Integrity, Report
from harness.model.vocab import Signature
from harness.outside import cleaned

SIGNING_KEY = "HARNESS_SIGNING_KEY"


@dataclass(frozen=True)
class LoadedReport:
    """A report read from disk: where from, whether it is still as its run wrote it (its
    sha256 matches) and what its keyed signature says (``Signature``)."""

    report: Report
    path: Path
    intact: bool
    signature: Signature = Signature.UNSIGNED


@cache
def _adapter() -> TypeAdapter[Report]:
    return TypeAdapter(Report)


OPTIONAL_BLOCKS = ("shard", "scores")  # absent from report.json unless the run has them


def _drop_none(block: Json, *keys: str) -> None:
    """Leave out of a JSON object the keys (all, when none are named) whose value is null."""
    if isinstance(block, dict):
        for key in keys or tuple(block):
            if key in block and block[key] is None:
                del block[key]


def to_json(report: Report) -> JsonObject:
    """The report.json document (blocks a run does not have are left out)."""
    data: JsonObject = _adapter().dump_python(report, mode="json")
    _drop_none(data, *OPTIONAL_BLOCKS, "integrity")
    _drop_none(data.get("timing"), "merged_shards")
    _drop_none(data.get("integrity"), "hmac")
    _drop_none(data.get("shard"))
    return data


def _canonical(report: JsonObject) -> bytes:
    """The report without its ``integrity`` block, keys sorted, compact, UTF-8."""
    body = {k: v for k, v in report.items() if k != "integrity"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def canonical_hash(report: JsonObject) -> str:
    """sha256 of the report without its ``integrity`` block, keys sorted, compact."""
    return hashlib.sha256(_canonical(report)).hexdigest()


def signing_key() -> bytes | None:
    """The key of HARNESS_SIGNING_KEY (None: unset or empty)."""
    key = os.environ.get(SIGNING_KEY, "")
    return key.encode("utf-8") if key else None


def signature(report: JsonObject, key: bytes) -> str:
    """HMAC-SHA256 of the bytes the sha256 covers, with ``key``."""
    return hmac.new(key, _canonical(report), hashlib.sha256).hexdigest()


def check_signature(report: JsonObject) -> Signature:
    """What the report's ``integrity.hmac`` says, read with this process's key."""
    integrity = report.get("integrity")
    recorded = integrity.get("hmac") if isinstance(integrity, dict) else None
    key = signing_key()
    if key is None:
        return Signature.UNCHECKED if recorded else Signature.UNSIGNED
    if not isinstance(recorded, str) or not recorded:
        return Signature.MISSING
    return Signature.VALID if hmac.compare_digest(recorded, signature(report, key)) else Signature.INVALID


def verify(report: JsonObject) -> bool:
    """True when the report.json document is exactly as written (its hash still matches)."""
    integrity = report.get("integrity")
    recorded = integrity.get("sha256") if isinstance(integrity, dict) else None
    return recorded == canonical_hash(report)


def seal(report: Report) -> Report:
    """The report with its outside text cleaned (``harness.outside``: secrets redacted, control
    characters escaped, in every string of it) and its ``integrity`` block (re)computed, signed
    when HARNESS_SIGNING_KEY is set; the last step before writing, so report.json, report.md,
    report.html and the terminal summary all show the one clean report."""
    report = cleaned(replace(report, integrity=None))
    body = to_json(report)
    key = signing_key()
    return replace(
        report,
        integrity=Integrity(
            sha256=canonical_hash(body), hmac=signature(body, key) if key is not None else None
        ),
    )


def check_sealed(loaded: LoadedReport, purpose: str) -> None:
    """ConfigError, one line naming the file, unless the report is as its run wrote it: its
    sha256 matches and, when this process has HARNESS_SIGNING_KEY, its HMAC was made with that
    key. ``purpose``: what the caller does only with such reports."""
    file = loaded.path
    if not loaded.intact:
        raise ConfigError(
            f"{file}: changed after it was written (its sha256 no longer matches "
            f"its content); {purpose} only reports as their runs wrote them"
        )
    if loaded.signature == Signature.MISSING:
        raise ConfigError(
            f"{file}: carries no HMAC, and {SIGNING_KEY} is set, so only reports "
            f"signed with it are accepted; {purpose} reports of runs made with "
            f"the key, or unset {SIGNING_KEY}"
        )
    if loaded.signature == Signature.INVALID:
        raise ConfigError(
            f"{file}: its HMAC was not made with this {SIGNING_KEY} over this "
            f"content: changed after it was written, or signed with another key; "
            f"{purpose} only reports as their runs wrote them"
        )


def _where(error: ValidationError) -> str:
    first = error.errors()[0]
    path = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return f"{path}: {first['msg']}"


def from_json(data: Json, source: str = "report.json") -> Report:
    """A report.json document as a Report; ConfigError naming the first bad field."""
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else None
        raise ConfigError(
            f"{source}: report schema_version {found!r}; this harness reads version {SCHEMA_VERSION}"
        )
    try:
        return _adapter().validate_python(data)
    except ValidationError as exc:
        raise ConfigError(
            f"{source}: not a report this harness can read ({_where(exc)}); give the report.json a run wrote"
        ) from None


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
    report = cleaned(from_json(data, str(file)))
    assert isinstance(data, dict)  # from_json refuses anything else
    return LoadedReport(report=report, path=file, intact=verify(data), signature=check_signature(data))
