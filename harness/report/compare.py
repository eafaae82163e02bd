"""``compare OLD NEW``: per cell and position, what changed between two runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.report.writer import SCHEMA_VERSION, verify


def load_report(path: str | Path) -> dict[str, Any]:
    """report.json from a report folder or the file itself."""
    p = Path(path)
    file = p / "report.json" if p.is_dir() else p
    if not file.is_file():
        raise ConfigError(f"{path}: no report.json there; give a report folder or a report.json")
    try:
        report = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{file}: not a readable report ({exc})") from None
    if not isinstance(report, dict) or report.get("schema_version") != SCHEMA_VERSION:
        found = report.get("schema_version") if isinstance(report, dict) else None
        raise ConfigError(f"{file}: report schema_version {found!r}; this harness compares "
                          f"version {SCHEMA_VERSION}")
    report["_path"] = str(file)
    return report


def _status(old: dict[str, Any] | None, new: dict[str, Any] | None, tol: float) -> str:
    if old is None:
        return "added"
    if new is None:
        return "dropped"
    if new["degraded"] and not old["degraded"]:
        return "new degradation"
    if old["degraded"] and not new["degraded"]:
        return "fixed"
    delta = new["rouge_l"] - old["rouge_l"]
    return "worse" if delta < -tol else "better" if delta > tol else "same"


def compare(old: dict[str, Any], new: dict[str, Any], tolerance: float | None = None) -> dict[str, Any]:
    """The comparison document; ``verdict`` is worse, better or same."""
    tol = tolerance if tolerance is not None else float(new["method"]["tolerance"])
    rotations = [r["method"].get("rotation", "full") for r in (old, new)]
    if rotations[0] != rotations[1] or ("sparse" in rotations
                                         and old["method"]["seed"] != new["method"]["seed"]):
        raise ConfigError(
            f"compare: OLD used --rotation {rotations[0]} (seed {old['method']['seed']}) and NEW "
            f"--rotation {rotations[1]} (seed {new['method']['seed']}), so their positions saw "
            "different prompts and their scores measure prompt difficulty, not the engine; "
            "compare runs made with the same --rotation (and, for sparse, the same --seed)")
    old_cells = {c["id"]: c for c in old["cells"]}
    new_cells = {c["id"]: c for c in new["cells"]}
    order = list(new_cells) + [cid for cid in old_cells if cid not in new_cells]
    cells, lines = [], []
    worse = better = False
    for cid in order:
        oc, nc = old_cells.get(cid), new_cells.get(cid)
        if oc is None or nc is None:
            lines.append(f"{cid}: only in the {'new' if oc is None else 'old'} run")
            continue
        if nc["verdict"] == "error" and oc["verdict"] != "error":
            worse = True
            lines.append(f"{cid}: new engine error: {nc['error']}")
        if oc["verdict"] == "error" and nc["verdict"] != "error":
            better = True
            lines.append(f"{cid}: engine error fixed")
        op = {p["position"]: p for p in oc["positions"]}
        np_ = {p["position"]: p for p in nc["positions"]}
        rows = []
        for pos in sorted(set(op) | set(np_)):
            o, n = op.get(pos), np_.get(pos)
            status = _status(o, n, tol)
            rows.append({"position": pos, "old": o["rouge_l"] if o else None,
                         "new": n["rouge_l"] if n else None,
                         "delta": (n["rouge_l"] - o["rouge_l"]) if o and n else None,
                         "status": status})
        for label in ("new degradation", "fixed", "worse", "better"):
            hit = [r["position"] for r in rows if r["status"] == label]
            if hit:
                lines.append(f"{cid}: {label} at positions {', '.join(map(str, hit))}")
        worse |= any(r["status"] in ("new degradation", "worse") for r in rows)
        better |= any(r["status"] in ("fixed", "better") for r in rows)
        cells.append({"id": cid, "positions": rows})
    limits_changed = {}
    ol, nl = old.get("limits") or {}, new.get("limits") or {}
    for key in sorted(set(ol) | set(nl)):
        if ol.get(key) != nl.get(key):
            limits_changed[key] = {"old": ol.get(key), "new": nl.get(key)}
            lines.append(f"limit {key}: {ol.get(key)} -> {nl.get(key)}")
    if old["verdict"] == "pass" and new["verdict"] == "fail":
        worse = True
    for side, report in (("old", old), ("new", new)):
        if not verify({k: v for k, v in report.items() if k != "_path"}):
            lines.append(f"warning: the {side} report {report['_path']} changed after it was written "
                         "(its sha256 no longer matches)")
    verdict = "worse" if worse else "better" if better else "same"
    if not lines:
        lines.append("no change beyond the tolerance")
    return {"verdict": verdict, "tolerance": tol, "lines": lines, "cells": cells,
            "limits_changed": limits_changed,
            "old": {"path": old["_path"], "verdict": old["verdict"]},
            "new": {"path": new["_path"], "verdict": new["verdict"]}}
