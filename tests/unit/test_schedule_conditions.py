"""Each request's conditions, read from the timings and what the engine said
(harness.stages.conditions)."""

from __future__ import annotations

from harness.engines.base import Generation
from harness.model.vocab import Condition
from harness.stages.arrivals import Sent
from harness.stages.conditions import conditions


def sent(rank: int, at: float, done: float, slot: int, first_token: float | None = None) -> Sent:
    g = Generation(text="x", slot=slot, first_token=first_token)
    return Sent(index=rank, rank=rank, sent=at, in_flight=min(rank, 3), answered=done, generation=g)


def _held(records: list[Sent], condition: Condition) -> list[int]:
    requests = conditions(
        records, list(range(len(records))), [f"d{i}" for i in range(len(records))], frozenset({1}), set()
    )
    return [r.rank for r in requests if condition in r.conditions]


def test_a_request_sent_while_a_long_prompt_was_still_being_prefilled_was_beside_it() -> None:
    """Request 2 went out after the long prompt 1 but before its first token: it shared the
    steps that prefilled it (a chunked prefill's victims include it). Without the engine's
    first-token time only request 0, in flight when 1 was sent, counts."""
    records = [
        sent(0, 0.0, 1.0, 0),
        sent(1, 0.1, 1.2, 1, first_token=0.3),
        sent(2, 0.2, 1.1, 2),
        sent(3, 0.5, 1.3, 3),
    ]
    assert _held(records, Condition.BESIDE_PREFILL) == [0, 2]
    untimed = [sent(0, 0.0, 1.0, 0), sent(1, 0.1, 1.2, 1), sent(2, 0.2, 1.1, 2), sent(3, 0.5, 1.3, 3)]
    assert _held(untimed, Condition.BESIDE_PREFILL) == [0]


def test_the_rows_past_a_captured_graph_size_are_those_past_the_power_of_two_below_how_many_ran() -> None:
    """Eight at once in slots 0-7 (a captured size): none past it. As they finish (slot 7 first,
    then 6, ...) seven, six and five are in flight: slots 4-6 are past the 4 below them; at
    three, slot 2 is past the 2 below it. Slots 0 and 1 never are."""
    eight = [sent(i, 0.0, 10.0 - i, slot=i) for i in range(8)]  # slot 7 answers first
    assert _held(eight, Condition.PAST_GRAPH) == [2, 4, 5, 6]
    at_once = [sent(i, 0.0, 1.0, slot=i) for i in range(8)]  # all answered together
    assert _held(at_once, Condition.PAST_GRAPH) == []
    unsaid = [
        Sent(index=i, rank=i, sent=0.0, in_flight=0, answered=1.0 + i, generation=Generation(text="x"))
        for i in range(8)
    ]
    assert _held(unsaid, Condition.PAST_GRAPH) == []


def test_prefill_mix_sends_its_long_prompts_longest_first_after_each_short_wave() -> None:
    """The longest prompt, the one an engine likeliest splits, goes in beside the first wave."""
    from typing import cast

    from harness.bounds import ScoringCap
    from harness.config import DecodingSettings
    from harness.engines.base import Engine
    from harness.model.vocab import Schedule
    from harness.stages.schedules import Ground, _order

    lengths = [100, 300, 90, 250, 80, 400, 70, 60]  # the longest quarter: documents 5 and 1
    ground = Ground(
        engine=cast(Engine, None),
        prompts=["p"] * 8,
        ids=[f"d{i}" for i in range(8)],
        references=[None] * 8,
        lengths=lengths,
        order=range(8),
        baseline=[""] * 8,
        against=[""] * 8,
        settings=DecodingSettings(beam_width=1, max_new_tokens=8),
        concurrency=4,
        cap=ScoringCap.for_tokens(8),
        timeout=None,
    )
    assert _order(ground, Schedule.PREFILL_MIX) == [0, 2, 3, 5, 4, 6, 7, 1]
    assert _order(ground, Schedule.REFILL) == list(range(8))
