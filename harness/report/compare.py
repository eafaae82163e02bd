"""``compare OLD NEW``: per cell and position, what changed between two runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.errors import ConfigError
from harness.report.model import LoadedReport
from harness.results import CellEntry, Method, PositionEntry, Report


@dataclass(frozen=True)
class PositionChange:
    position: int
    old: float | None
    new: float | None
    delta: float | None
    status: str  # added | dropped | new degradation | fixed | worse | better | same | unmeasured


@dataclass(frozen=True)
class CellChange:
    id: str
    positions: tuple[PositionChange, ...]


@dataclass(frozen=True)
class Side:
    path: str
    verdict: str


@dataclass(frozen=True)
class Comparison:
    """What ``compare`` found; ``verdict`` is worse, better or same."""

    verdict: str
    tolerance: float
    lines: tuple[str, ...]
    cells: tuple[CellChange, ...]
    old: Side
    new: Side
    limits_changed: dict[str, dict[str, Any]] = field(default_factory=dict)


def value(p: PositionEntry) -> float | None:
    """What a position is compared by: its quality against the references where the run
    measured it, else its agreement with the baseline."""
    x = p.quality if p.quality is not None else p.agreement
    return None if x is None or math.isnan(x) else x


def _status(old: PositionEntry | None, new: PositionEntry | None, tol: float) -> str:
    if old is None:
        return "added"
    if new is None:
        return "dropped"
    if new.degraded and not old.degraded:
        return "new degradation"
    if old.degraded and not new.degraded:
        return "fixed"
    ov, nv = value(old), value(new)
    if nv is None or ov is None:
        return "same" if nv is None and ov is None else "unmeasured" if nv is None else "added"
    delta = nv - ov
    return "worse" if delta < -tol else "better" if delta > tol else "same"


def check_same_rotation(old: Method, new: Method) -> None:
    """Positions of two runs are comparable only when they saw the same prompts."""
    rotations = [old.rotation, new.rotation]
    if rotations[0] != rotations[1] or ("sparse" in rotations and old.seed != new.seed):
        raise ConfigError(
            f"compare: OLD used --rotation {rotations[0]} (seed {old.seed}) and NEW "
            f"--rotation {rotations[1]} (seed {new.seed}), so their positions saw "
            "different prompts and their scores measure prompt difficulty, not the engine; "
            "compare runs made with the same --rotation (and, for sparse, the same --seed)")


def _cell_change(oc: CellEntry, nc: CellEntry, tol: float, lines: list[str]) -> CellChange:
    if nc.verdict == "error" and oc.verdict != "error":
        lines.append(f"{nc.id}: new engine error: {nc.error}")
    if oc.verdict == "error" and nc.verdict != "error":
        lines.append(f"{nc.id}: engine error fixed")
    op = {p.position: p for p in oc.positions}
    np_ = {p.position: p for p in nc.positions}
    rows = []
    for pos in sorted(set(op) | set(np_)):
        o, n = op.get(pos), np_.get(pos)
        ov, nv = (value(o) if o else None), (value(n) if n else None)
        rows.append(PositionChange(position=pos, old=ov, new=nv,
                                   delta=(nv - ov) if ov is not None and nv is not None else None,
                                   status=_status(o, n, tol)))
    for label in ("new degradation", "fixed", "worse", "better", "dropped", "unmeasured"):
        hit = [r.position for r in rows if r.status == label]
        if hit:
            lines.append(f"{nc.id}: {label} at positions {', '.join(map(str, hit))}")
    return CellChange(id=nc.id, positions=tuple(rows))


def _limits_changed(old: Report, new: Report, lines: list[str]) -> dict[str, dict[str, Any]]:
    ol = old.limits.__dict__ if old.limits else {}
    nl = new.limits.__dict__ if new.limits else {}
    changed = {}
    for key in sorted(set(ol) | set(nl)):
        if ol.get(key) != nl.get(key):
            changed[key] = {"old": ol.get(key), "new": nl.get(key)}
            lines.append(f"limit {key}: {ol.get(key)} -> {nl.get(key)}")
    return changed


def compare(old_loaded: LoadedReport, new_loaded: LoadedReport,
            tolerance: float | None = None) -> Comparison:
    """What changed from OLD to NEW, per cell and position."""
    old, new = old_loaded.report, new_loaded.report
    tol = tolerance if tolerance is not None else float(new.method.tolerance)
    check_same_rotation(old.method, new.method)
    old_cells = {c.id: c for c in old.cells}
    new_cells = {c.id: c for c in new.cells}
    order = list(new_cells) + [cid for cid in old_cells if cid not in new_cells]
    cells, lines = [], []
    for cid in order:
        oc, nc = old_cells.get(cid), new_cells.get(cid)
        if oc is None or nc is None:
            lines.append(f"{cid}: only in the new run" if oc is None else
                         f"{cid}: only in the old run: NEW no longer tests it (counts as worse)")
            continue
        cells.append(_cell_change(oc, nc, tol, lines))
    limits_changed = _limits_changed(old, new, lines)
    statuses = {p.status for c in cells for p in c.positions}
    errors = {c.id for c in new.cells if c.verdict == "error"} - {
        c.id for c in old.cells if c.verdict == "error"}
    lost = [cid for cid in old_cells if cid not in new_cells]  # a cell NEW no longer tests
    worse = bool(errors or lost or statuses & {"new degradation", "worse", "dropped", "unmeasured"}
                 or (old.verdict == "pass" and new.verdict == "fail"))
    better = bool(statuses & {"fixed", "better"}) or any(
        line.endswith("engine error fixed") for line in lines)
    for side, loaded in (("old", old_loaded), ("new", new_loaded)):
        if not loaded.intact:
            lines.append(f"warning: the {side} report {loaded.path} changed after it was written "
                         "(its sha256 no longer matches)")
    if not lines:
        lines.append("no change beyond the tolerance")
    return Comparison(verdict="worse" if worse else "better" if better else "same",
                      tolerance=tol, lines=tuple(lines), cells=tuple(cells),
                      old=Side(str(old_loaded.path), str(old.verdict)),
                      new=Side(str(new_loaded.path), str(new.verdict)),
                      limits_changed=limits_changed)
