"""Where each request of a scheduled pass really ran, read from the arrival loop's timings and
what the engine said: its conditions (first wave, joined a running batch, took a freed slot,
beside a long prefill, served from cache, past a captured graph size), and how the engine
answered a first wave sent at once (``harness.engines.batching``)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.engines.batching import judge_batch
from harness.model.cell import captured_below, is_captured
from harness.model.schedule import ServedRequest
from harness.model.vocab import Condition, Served
from harness.stages.arrivals import Sent


def conditions(
    sent: Sequence[Sent], docs: Sequence[int], ids: Sequence[str], long: frozenset[int], used: set[int]
) -> list[ServedRequest]:
    """Each request's place in the run, in arrival order (``docs``: the documents sent, ``ids``
    their names by document), from the timings and what the engine said; ``used``: the slots
    that had served a request of this open path before (updated)."""
    first_answer = min((s.answered for s in sent if s.answered is not None), default=0.0)
    padded = past_graph(sent)
    prefills = [(s.rank, s.sent, prefilled(s)) for s in sent if docs[s.index] in long]
    out = []
    for s in sorted(sent, key=lambda r: r.answered or 0.0):  # slots free in answer order
        g = s.generation
        slot = g.slot if g else None
        cached = g.cached_tokens if g else None
        reused = None if slot is None else slot in used
        held = {
            Condition.FIRST_WAVE: s.sent < first_answer,
            Condition.JOINED: s.in_flight > 0,
            Condition.FREED_SLOT: bool(reused),
            Condition.LONG_PREFILL: docs[s.index] in long and s.in_flight > 0,
            Condition.BESIDE_PREFILL: any(
                rank != s.rank and s.sent <= end and (s.answered or 0.0) > start
                for rank, start, end in prefills
            ),
            Condition.CACHED: bool(cached),
            Condition.PAST_GRAPH: s.rank in padded,
        }
        if slot is not None:
            used.add(slot)
        out.append(
            ServedRequest(
                document=ids[docs[s.index]],
                rank=s.rank,
                sent=round(s.sent, 6),
                answered=round(s.answered or 0.0, 6),
                in_flight=s.in_flight,
                slot=slot,
                slot_reused=reused,
                cached_tokens=cached,
                conditions=tuple(c for c, on in held.items() if on),
            )
        )
    return sorted(out, key=lambda r: r.rank)


def past_graph(sent: Sequence[Sent]) -> set[int]:
    """The requests (ranks) that at some moment, with a number A of requests in flight that is
    not a power of two (3, 5, 6, 7, ...), held a slot whose place among the in-flight requests'
    slots was at or past the largest power of two below A: the rows a step padded up to the
    next captured CUDA-graph size holds past its last captured one (the in-flight side of the
    bulk graph ladder, ``harness.model.cell``). Only requests whose engine named their slot."""
    slotted = [
        (s.sent, s.answered if s.answered is not None else float("inf"), s.generation.slot, s.rank)
        for s in sent
        if s.generation is not None and s.generation.slot is not None
    ]
    moments = sorted({t for start, end, _, _ in slotted for t in (start, end) if t != float("inf")})
    out: set[int] = set()
    for t in moments:
        active = sorted((slot, rank) for start, end, slot, rank in slotted if start <= t < end)
        if len(active) > 2 and not is_captured(len(active)):
            out.update(rank for _, rank in active[captured_below(len(active)) :])
    return out


def prefilled(s: Sent) -> float:
    """When a request's prompt was prefilled: its first token where the engine says when, else
    its sending."""
    g = s.generation
    return s.sent + (g.first_token or 0.0) if g is not None else s.sent


def first_wave_served(sent: Sequence[Sent], max_tokens: int) -> Served | None:
    """How the engine answered the requests sent before any answer came back, where it timed
    them (harness.engines.batching; None: a first wave of one, or no timing)."""
    first = min((s.answered for s in sent if s.answered is not None), default=0.0)
    wave = [s.generation for s in sent if s.sent < first and s.generation is not None]
    timings = [g.timing for g in wave]
    if len(wave) < 2 or any(t is None for t in timings):
        return None
    return judge_batch(timings, [g.text for g in wave], max_tokens).verdict
