"""What a beam width's scheduled passes sent and got, as the generation cache keeps them.

A run that sent its scheduled cells' requests keeps, per beam width, every open in-flight path's
passes: each request as the arrival loop recorded it (``Sent``: its prompt's index, arrival
rank, when it went out and came back, how many others were in flight, the engine's answer with
its slot, cached tokens and timings) and what the engine said of the path (its cache, whether
its slots were fresh). A rerun with the same key (``harness.storage.cache``: the engine's
fingerprint, the settings, and ``sending_plan`` here) replays them: the conditions, scores and verdicts
are computed again from the records by the current code, exactly as from a live pass. Only
whole beam widths whose every schedule happened as planned are kept
(``harness.stages.schedules``); ``--no-cache`` sends them again.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from pydantic import TypeAdapter, ValidationError

from harness.engines.base import Generation
from harness.model.json import Json, JsonObject, as_json
from harness.model.vocab import Schedule
from harness.stages import arrivals
from harness.stages.arrivals import Sent


@dataclass(frozen=True)
class Shape:
    """How one pass sends its requests: the prompts in order, the first wave sent at once, the
    most in flight, and the gap between later ones (None: paced by the engine)."""

    prompts: tuple[str, ...]
    first_wave: int
    cap: int
    gap: float | None


@dataclass(frozen=True)
class Opened:
    """One opened in-flight path: its passes in order (each request as sent, in arrival rank),
    what the engine said of its cache, and whether its slots were its own."""

    passes: tuple[tuple[Sent, ...], ...]
    cache: str | None
    fresh_slots: bool


@functools.cache
def loop_digest() -> str:
    """sha256 of the arrival loop's source: a change to how requests are paced must not replay
    passes the old loop sent."""
    return hashlib.sha256(Path(arrivals.__file__).read_bytes()).hexdigest()


def sending_plan(paths: Sequence[tuple[Schedule, Sequence[Shape]]]) -> Json:
    """A beam width's passes as the cache key holds them: each path's schedule and the shape of
    each of its passes, with the arrival loop's digest."""
    return {
        "loop": loop_digest(),
        "paths": [
            {
                "schedule": schedule.value,
                "passes": [
                    {"prompts": list(s.prompts), "first_wave": s.first_wave, "cap": s.cap, "gap": s.gap}
                    for s in shapes
                ],
            }
            for schedule, shapes in paths
        ],
    }


def dumped(paths: Sequence[Opened]) -> Json:
    """The paths as JSON (a pass is kept only when every request was answered: no errors)."""
    return [
        {
            "cache": p.cache,
            "fresh_slots": p.fresh_slots,
            "passes": [[_sent(s) for s in sent] for sent in p.passes],
        }
        for p in paths
    ]


def _sent(s: Sent) -> JsonObject:
    assert s.error is None and s.generation is not None, "only answered requests are kept"
    return {
        "index": s.index,
        "rank": s.rank,
        "sent": s.sent,
        "in_flight": s.in_flight,
        "answered": s.answered,
        "generation": as_json(s.generation),
    }


_GENERATION = TypeAdapter(Generation)


def loaded(value: Json, shapes: Sequence[Sequence[Shape]]) -> list[Opened] | None:
    """``dumped``'s paths again, when ``value`` holds one path per entry of ``shapes`` with one
    pass per shape, each a request per prompt, every request answered; None otherwise."""
    if not isinstance(value, list) or len(value) != len(shapes):
        return None
    out = []
    for item, passes in zip(value, shapes):
        if not isinstance(item, dict):
            return None
        cache, fresh, sent = item.get("cache"), item.get("fresh_slots"), item.get("passes")
        if not (cache is None or isinstance(cache, str)) or not isinstance(fresh, bool):
            return None
        if not isinstance(sent, list) or len(sent) != len(passes):
            return None
        read = [_pass(records, len(shape.prompts)) for records, shape in zip(sent, passes)]
        kept = [r for r in read if r is not None]
        if len(kept) != len(read):
            return None
        out.append(Opened(tuple(kept), cache, fresh))
    return out


def _pass(records: Json, size: int) -> tuple[Sent, ...] | None:
    """One pass's requests: ``size`` of them, one per prompt index, ranked 0..size-1."""
    if not isinstance(records, list) or len(records) != size:
        return None
    out = []
    for rank, r in enumerate(records):
        if not isinstance(r, dict) or r.get("rank") != rank:
            return None
        index, sent, in_flight, answered = (
            r.get("index"),
            r.get("sent"),
            r.get("in_flight"),
            r.get("answered"),
        )
        if not (_count(index) and _count(in_flight) and _time(sent) and _time(answered)):
            return None
        try:
            generation = _GENERATION.validate_python(r.get("generation"))
        except ValidationError:
            return None
        out.append(Sent(index, rank, float(sent), in_flight, float(answered), generation))
    if sorted(s.index for s in out) != list(range(size)):
        return None
    return tuple(out)


def _count(value: Json) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _time(value: Json) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
