"""Read the recorded answers in tests/data/servers/ (written by ``tests/servers/record.py``).

    from tests.servers import recordings
    rec = recordings.load("llama-cpp-python", "greedy-c4")    # prompts resolved to their text
    table = recordings.answers("llama-server")               # canonical body -> recorded answer
    table[recordings.key(body)]["response"]["choices"]

A recorded request's body has the prompt as ``{"$prompt": ID}`` (``{"$prompt": ID,
"repeat": N}`` for a prompt repeated N times); :func:`load` puts the text back, so a body
equals what was sent.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "servers"


@cache
def prompts(root: Path = DATA) -> dict[str, str]:
    return dict(json.loads((root / "prompts.json").read_text(encoding="utf-8"))["prompts"])


def _resolve(body: dict[str, Any], root: Path) -> dict[str, Any]:
    p = body.get("prompt")
    if isinstance(p, dict) and "$prompt" in p:
        return {**body, "prompt": prompts(root)[p["$prompt"]] * int(p.get("repeat", 1))}
    return body


def load(kind: str, name: str, root: Path = DATA) -> dict[str, Any]:
    """One recorded file (``server``, ``errors``, ``greedy-c1``, ...) with bodies resolved."""
    data: dict[str, Any] = json.loads((root / kind / f"{name}.json").read_text(encoding="utf-8"))
    for group in ("batches", "alone"):
        for batch in data.get(group, []):
            for r in batch["requests"]:
                r["body"] = _resolve(r["body"], root)
    for case in data.get("cases", []):
        case["body"] = _resolve(case["body"], root)
    return data


def sets(kind: str, root: Path = DATA) -> list[str]:
    return sorted(p.stem for p in (root / kind).glob("*.json") if p.stem not in ("server", "errors"))


def key(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, ensure_ascii=False)


def answers(kind: str, root: Path = DATA) -> dict[str, dict[str, Any]]:
    """Every recorded request of ``kind`` by its canonical body (the last recording wins)."""
    out: dict[str, dict[str, Any]] = {}
    for name in sets(kind, root):
        data = load(kind, name, root)
        for group in ("alone", "batches"):
            for batch in data.get(group, []):
                for r in batch["requests"]:
                    out[key(r["body"])] = r
    for case in load(kind, "errors", root)["cases"]:
        out[key(case["body"])] = case
    return out
