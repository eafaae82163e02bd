"""``compare OLD NEW``: per cell and position, what changed between two runs.

Only two reports of the same test are compared, each as its run wrote it; anything else is
refused in one line (a ConfigError: exit 2), never compared with a warning:

- each report must be sealed as written (``serialize.check_sealed``: its sha256 matches and,
  with HARNESS_SIGNING_KEY, its HMAC was made with that key);
- every verdict it records must follow from its own statistics and method
  (``audit.audit``): a verdict edited to pass with the sha256 recomputed is found there;
- both must be runs of the same test (``check_same_test``): the same dataset (content hash),
  the same method (tolerance, alpha, --deterministic, rotation and, for sparse, seed) and
  generation settings (--max-new-tokens, --length-penalty, prompt template, --chat, request
  fields), and at least one cell in common. The engine may differ (two builds on one test is
  what compare is for): it is named in the first line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.errors import ConfigError
from harness.model.analysis import PositionStats
from harness.model.json import Json, as_json
from harness.model.report import CellResult, Method, Report
from harness.model.vocab import Change, Direction, Rotation, Signature, Verdict
from harness.report.audit import audit
from harness.report.serialize import SIGNING_KEY, LoadedReport, check_sealed

# run options that decide what a position's figures measure: two runs that differ in one
# measured something else
SAME_SETTINGS = ("max_new_tokens", "length_penalty", "prompt_template", "chat", "request_fields")


@dataclass(frozen=True)
class PositionChange:
    """One position's figure in both runs (quality, else agreement) and what changed."""

    position: int
    old: float | None
    new: float | None
    delta: float | None
    status: Change


@dataclass(frozen=True)
class CellChange:
    """One cell present in both runs."""

    id: str
    positions: tuple[PositionChange, ...]
    error_added: bool = False  # NEW has an engine error OLD did not
    error_fixed: bool = False  # OLD had an engine error NEW does not


@dataclass(frozen=True)
class Side:
    """One of the two reports: where, its verdict, and whether it is as its run wrote it."""

    path: str
    verdict: Verdict
    intact: bool = True  # its sha256 still matches (compare refuses a report whose does not)


@dataclass(frozen=True)
class Comparison:
    """What ``compare`` found, the new run against the old one."""

    verdict: Direction
    tolerance: float
    lines: tuple[str, ...]
    cells: tuple[CellChange, ...]
    old: Side
    new: Side
    limits_changed: dict[str, dict[str, Json]] = field(default_factory=dict)


def value(p: PositionStats) -> float | None:
    """What a position is compared by: its quality against the references where the run
    measured it, else its agreement with the baseline."""
    return None if math.isnan(p.shown) else p.shown


def _status(old: PositionStats | None, new: PositionStats | None, tol: float) -> Change:
    if old is None:
        return Change.ADDED
    if new is None:
        return Change.DROPPED
    if new.degraded and not old.degraded:
        return Change.NEW_DEGRADATION
    if old.degraded and not new.degraded:
        return Change.FIXED
    ov, nv = value(old), value(new)
    if nv is None or ov is None:
        return Change.SAME if nv is None and ov is None else Change.UNMEASURED if nv is None else Change.ADDED
    delta = nv - ov
    return Change.WORSE if delta < -tol else Change.BETTER if delta > tol else Change.SAME


def check_same_rotation(old: Method, new: Method) -> None:
    """Positions of two runs are comparable only when they saw the same prompts."""
    rotations = [old.rotation, new.rotation]
    if rotations[0] != rotations[1] or (Rotation.SPARSE in rotations and old.seed != new.seed):
        raise ConfigError(
            f"compare: OLD used --rotation {rotations[0]} (seed {old.seed}) and NEW "
            f"--rotation {rotations[1]} (seed {new.seed}), so their positions saw "
            "different prompts and their scores measure prompt difficulty, not the engine; "
            "compare runs made with the same --rotation (and, for sparse, the same --seed)"
        )


def check_consistent(loaded: LoadedReport) -> None:
    """ConfigError naming the file when a recorded verdict does not follow from the report's
    own statistics and method (harness.report.audit)."""
    found = audit(loaded.report)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ConfigError(
            f"{loaded.path}: its recorded verdicts do not follow from its own "
            f"statistics and method: {found[0]}{more}; it was edited after its "
            "run wrote it, and compare reads only reports as their runs wrote them"
        )


def _shown(value: object) -> str:
    return f"{value[:12]}..." if isinstance(value, str) and len(value) > 15 else repr(value)


def check_same_test(old_loaded: LoadedReport, new_loaded: LoadedReport) -> None:
    """ConfigError naming every difference that makes the two runs measure different things:
    the dataset, the method, the generation settings, or a grid with no cell in common."""
    old, new = old_loaded.report, new_loaded.report
    pairs: list[tuple[str, object, object]] = [
        ("dataset (content hash)", old.dataset.hash, new.dataset.hash),
        ("tolerance", old.method.tolerance, new.method.tolerance),
        ("alpha", old.method.alpha, new.method.alpha),
        ("deterministic", old.method.deterministic, new.method.deterministic),
        *((name, old.options.get(name), new.options.get(name)) for name in SAME_SETTINGS),
    ]
    differ = [f"{name} (OLD {_shown(a)}, NEW {_shown(b)})" for name, a, b in pairs if a != b]
    old_ids, new_ids = [c.id for c in old.cells], [c.id for c in new.cells]
    if not set(old_ids) & set(new_ids):
        differ.append(
            f"the grid: no cell in common (OLD {', '.join(old_ids) or 'none'}; NEW "
            f"{', '.join(new_ids) or 'none'})"
        )
    if differ:
        raise ConfigError(
            f"compare: {old_loaded.path} and {new_loaded.path} are not runs of the same test: "
            f"{'; '.join(differ)}; compare two runs on the same dataset with the same method and "
            "generation settings (the engine is what may differ)"
        )


def _notes(old_loaded: LoadedReport, new_loaded: LoadedReport) -> list[str]:
    """What a reader should know before the changes: another engine, unchecked signatures."""
    o, n = old_loaded.report.engine, new_loaded.report.engine
    notes = []
    if (o.identity, o.backend) != (n.identity, n.backend):
        notes.append(
            f"engine: OLD {o.identity} ({o.backend}), NEW {n.identity} ({n.backend}): "
            "two engines on the same test"
        )
    for side, loaded in (("OLD", old_loaded), ("NEW", new_loaded)):
        if loaded.signature == Signature.UNCHECKED:
            notes.append(f"note: {side} {loaded.path}: HMAC not checked ({SIGNING_KEY} is not set here)")
    return notes


def _cell_change(oc: CellResult, nc: CellResult, tol: float, lines: list[str]) -> CellChange:
    error_added = nc.verdict == Verdict.ERROR and oc.verdict != Verdict.ERROR
    error_fixed = oc.verdict == Verdict.ERROR and nc.verdict != Verdict.ERROR
    if error_added:
        lines.append(f"{nc.id}: new engine error: {nc.error}")
    if error_fixed:
        lines.append(f"{nc.id}: engine error fixed")
    op = {p.position: p for p in oc.positions}
    np_ = {p.position: p for p in nc.positions}
    rows = []
    for pos in sorted(set(op) | set(np_)):
        o, n = op.get(pos), np_.get(pos)
        ov, nv = (value(o) if o else None), (value(n) if n else None)
        rows.append(
            PositionChange(
                position=pos,
                old=ov,
                new=nv,
                delta=(nv - ov) if ov is not None and nv is not None else None,
                status=_status(o, n, tol),
            )
        )
    for label in (
        Change.NEW_DEGRADATION,
        Change.FIXED,
        Change.WORSE,
        Change.BETTER,
        Change.DROPPED,
        Change.UNMEASURED,
    ):
        hit = [r.position for r in rows if r.status == label]
        if hit:
            lines.append(f"{nc.id}: {label} at positions {', '.join(map(str, hit))}")
    return CellChange(id=nc.id, positions=tuple(rows), error_added=error_added, error_fixed=error_fixed)


def _limits_changed(old: Report, new: Report, lines: list[str]) -> dict[str, dict[str, Json]]:
    ol, nl = as_json(old.limits), as_json(new.limits)
    ol, nl = ol if isinstance(ol, dict) else {}, nl if isinstance(nl, dict) else {}
    changed = {}
    for key in sorted(set(ol) | set(nl)):
        if ol.get(key) != nl.get(key):
            changed[key] = {"old": ol.get(key), "new": nl.get(key)}
            lines.append(f"limit {key}: {ol.get(key)} -> {nl.get(key)}")
    return changed


def _schedules_changed(old: Report, new: Report, lines: list[str]) -> bool:
    """A line per scheduled cell whose verdict changed; whether one that passed no longer does
    (failed, untested, raised, or is no longer run while the old run ran it)."""
    before = {c.id: c for c in old.schedules}
    after = {c.id: c for c in new.schedules}
    worse = False
    for cid in list(after) + [c for c in before if c not in after]:
        o, n = before.get(cid), after.get(cid)
        if o is not None and n is not None and o.verdict == n.verdict:
            continue
        was = o.verdict if o else "not run"
        now = n.verdict if n else "not run"
        lines.append(f"{cid}: {was} -> {now}" + (f": {n.message}" if n else ""))
        worse = worse or (was == Verdict.PASS and now != Verdict.PASS)
    return worse


def compare(old_loaded: LoadedReport, new_loaded: LoadedReport, tolerance: float | None = None) -> Comparison:
    """What changed from OLD to NEW, per cell and position."""
    old, new = old_loaded.report, new_loaded.report
    for loaded in (old_loaded, new_loaded):
        check_sealed(loaded, "compare reads")
        check_consistent(loaded)
    tol = tolerance if tolerance is not None else float(new.method.tolerance)
    check_same_rotation(old.method, new.method)
    check_same_test(old_loaded, new_loaded)
    old_cells = {c.id: c for c in old.cells}
    new_cells = {c.id: c for c in new.cells}
    order = list(new_cells) + [cid for cid in old_cells if cid not in new_cells]
    cells, lines = [], []
    for cid in order:
        oc, nc = old_cells.get(cid), new_cells.get(cid)
        if oc is None or nc is None:
            lines.append(
                f"{cid}: only in the new run"
                if oc is None
                else f"{cid}: only in the old run: NEW no longer tests it (counts as worse)"
            )
            continue
        cells.append(_cell_change(oc, nc, tol, lines))
    limits_changed = _limits_changed(old, new, lines)
    scheduled_worse = _schedules_changed(old, new, lines)
    statuses = {p.status for c in cells for p in c.positions}
    errors = {c.id for c in new.cells if c.verdict == Verdict.ERROR} - {
        c.id for c in old.cells if c.verdict == Verdict.ERROR
    }
    lost = [cid for cid in old_cells if cid not in new_cells]  # a cell NEW no longer tests
    worse = bool(
        errors
        or lost
        or scheduled_worse
        or statuses & {Change.NEW_DEGRADATION, Change.WORSE, Change.DROPPED, Change.UNMEASURED}
        or (old.verdict == Verdict.PASS and new.verdict == Verdict.FAIL)
    )
    better = bool(statuses & {Change.FIXED, Change.BETTER}) or any(c.error_fixed for c in cells)
    if not lines:
        lines.append("no change beyond the tolerance")
    lines[:0] = _notes(old_loaded, new_loaded)
    return Comparison(
        verdict=Direction.WORSE if worse else Direction.BETTER if better else Direction.SAME,
        tolerance=tol,
        lines=tuple(lines),
        cells=tuple(cells),
        old=Side(str(old_loaded.path), old.verdict, old_loaded.intact),
        new=Side(str(new_loaded.path), new.verdict, new_loaded.intact),
        limits_changed=limits_changed,
    )
