"""The scheduled cells' verdict (harness.verdict.schedules): a schedule counts only where it
happened; damage confined to one condition flags its group and is named by it; drift passes;
one Holm family over every scheduled test."""

from __future__ import annotations

import dataclasses

from harness.model.schedule import ServedRequest
from harness.model.vocab import Condition, Schedule, Verdict
from harness.verdict.schedules import Drive, judge, separating

FREED, FIRST = (Condition.JOINED, Condition.FREED_SLOT), (Condition.FIRST_WAVE,)


def request(
    rank: int,
    *,
    lost: float = 0.0,
    changed: bool = False,
    in_flight: int = 3,
    conditions: tuple[Condition, ...] = FREED,
    noise: float = 0.0,
) -> ServedRequest:
    """A request whose quality is batch size 1's (0.5, plus ``noise``) less ``lost``."""
    return ServedRequest(
        document=f"d{rank}",
        rank=rank,
        sent=rank * 0.1,
        answered=rank * 0.1 + 1,
        in_flight=in_flight,
        slot=rank % 4,
        slot_reused=Condition.FREED_SLOT in conditions,
        conditions=conditions,
        agreement=1.0 - lost,
        agreement_bs1=1.0,
        quality=0.5 + noise - lost,
        quality_bs1=0.5 + noise,
        changed=changed or lost > 0,
    )


def refill(requests: list[ServedRequest], schedule: Schedule = Schedule.REFILL) -> Drive:
    return Drive(schedule, 1, 4, tuple(requests), peak=4)


def test_a_schedule_whose_requests_never_overlapped_is_untested_not_passed() -> None:
    serial = [request(i, in_flight=0, conditions=()) for i in range(20)]
    (cell,) = judge([refill(serial)], tolerance=0.02, alpha=0.01)
    assert cell.verdict == Verdict.UNTESTED and cell.overlap == 0.0
    assert "joined a running batch" in cell.message and "one by one" in cell.message


def test_damage_on_the_refilled_slots_fails_and_is_named_by_that_condition() -> None:
    first = [request(i, in_flight=i, conditions=FIRST, noise=0.01 * i) for i in range(4)]
    first += [request(i, lost=0.0, conditions=(Condition.JOINED,), noise=0.02) for i in range(24, 28)]
    later = [request(i, lost=0.3 + 0.01 * (i % 3), noise=0.01 * (i % 5)) for i in range(4, 24)]
    (cell,) = judge([refill(first + later)], tolerance=0.02, alpha=0.01)
    assert cell.verdict == Verdict.FAIL and len(cell.damaged) == 20
    assert cell.separation == "damaged: 20 of 20 requests that took a freed slot; 0 of 8 others"
    assert "worst: requests that" in cell.message


def test_outputs_that_changed_without_losing_quality_pass_as_drift_unless_deterministic() -> None:
    drifted = [request(i, changed=i % 3 == 0, noise=0.01 * (i % 4)) for i in range(24)]
    (cell,) = judge([refill(drifted)], tolerance=0.02, alpha=0.01)
    assert cell.verdict == Verdict.PASS and cell.changed == 8 and not cell.damaged
    (strict,) = judge([refill(drifted)], tolerance=0.02, alpha=0.01, deterministic=True)
    assert strict.verdict == Verdict.FAIL and "under --deterministic" in strict.message


def test_one_holm_family_spans_every_scheduled_cell() -> None:
    mild = [request(i, lost=0.05 + 0.02 * (i % 5)) for i in range(12)]
    alone = judge([refill(mild)], tolerance=0.02, alpha=0.01)[0]
    clean = [request(i, noise=0.01 * (i % 4)) for i in range(12)]
    together = judge([refill(mild), refill(clean, Schedule.STAGGERED)], tolerance=0.02, alpha=0.01)[0]
    assert alone.test is not None and together.test is not None
    assert together.test.p_adjusted is not None and alone.test.p_adjusted is not None
    assert together.test.p_adjusted > alone.test.p_adjusted  # more tests in the family


def test_a_warm_pass_needs_no_overlap_and_is_compared_with_its_cold_run() -> None:
    warm = [request(i, in_flight=0, conditions=(Condition.CACHED,), lost=0.4) for i in range(10)]
    (cell,) = judge([refill(warm, Schedule.WARM)], tolerance=0.02, alpha=0.01)
    assert cell.verdict == Verdict.FAIL and "against their cold run" in cell.message
    # the cache is what a warm pass changes against its cold run: named, though every request holds it
    assert cell.separation == "damaged: 10 of 10 requests, each served from cache, against their cold run"
    found = separating(cell.requests, Schedule.WARM)
    assert found is not None and found.condition == Condition.CACHED
    # the same requests in a cold cell: nothing sets them apart
    cold = separating(cell.requests, Schedule.REFILL)
    assert cold is not None and cold.condition is None and "no condition setting them apart" in cold.text


def test_an_engine_that_answers_a_first_wave_one_after_another_is_a_queue_not_a_batch() -> None:
    from harness.engines.base import Generation, RequestTiming
    from harness.model.vocab import Served
    from harness.stages.arrivals import Sent
    from harness.stages.conditions import first_wave_served

    def sent(i: int, finished: float) -> Sent:
        timing = RequestTiming(sent=0.0, written=0.001, first_byte=finished, finished=finished, tokens=20)
        return Sent(i, i, 0.0, i, finished, Generation(text="word " * 20, timing=timing))

    queue = [sent(i, 1.0 * (i + 1)) for i in range(4)]  # each answer a whole request-time later
    batch = [sent(i, 1.0 + 0.02 * i) for i in range(4)]  # all four decoded together
    assert first_wave_served(queue, 64) == Served.ONE_AFTER_ANOTHER
    assert first_wave_served(batch, 64) == Served.TOGETHER
    assert first_wave_served([dataclasses.replace(s, generation=Generation("x")) for s in queue], 64) is None
    requests = [request(i) for i in range(12)]
    (cell,) = judge([dataclasses.replace(refill(requests), served=Served.ONE_AFTER_ANOTHER)], 0.02, 0.01)
    assert cell.verdict == Verdict.UNTESTED and "one after another" in cell.message


def test_the_audit_decides_every_scheduled_cell_again_from_its_requests() -> None:
    from harness.verdict.schedules import decided_again

    first = [request(i, in_flight=i, conditions=FIRST) for i in range(4)]
    damaged = [request(i, lost=0.3 + 0.01 * (i % 3)) for i in range(4, 24)]
    cells = judge([refill(first + damaged), refill(first, Schedule.STAGGERED)], tolerance=0.02, alpha=0.01)
    assert decided_again(cells, 0.02, 0.01) == []
    forged = dataclasses.replace(cells[0], verdict=Verdict.PASS)
    assert any(
        line.startswith("refill-c4-beam1: verdict pass, but its requests make it fail")
        for line in decided_again([forged, cells[1]], 0.02, 0.01)
    )
    hidden = dataclasses.replace(cells[0], verdict=Verdict.NOT_APPLICABLE)
    assert decided_again([hidden], 0.02, 0.01) == [
        "refill-c4-beam1: not applicable, but it holds 24 requests"
    ]


def test_a_condition_nearly_every_request_holds_does_not_name_the_damage() -> None:
    """Joined held by all but two requests covered every damaged one and was named, though the
    damage was on the rows past a captured graph size: a condition that all but a few requests
    hold covers the damage by holding everything, and its few others say nothing."""
    late = (Condition.JOINED, Condition.PAST_GRAPH)
    requests = [request(0, in_flight=0, conditions=FIRST), request(1, in_flight=0, conditions=FIRST)]
    requests += [request(i, conditions=(Condition.JOINED,), noise=0.01 * (i % 3)) for i in range(2, 20)]
    requests += [request(i, lost=0.3, conditions=late) for i in range(20, 32)]
    (cell,) = judge([refill(requests)], tolerance=0.02, alpha=0.01)
    assert cell.verdict == Verdict.FAIL and cell.separated_by == Condition.PAST_GRAPH
    assert cell.separation is not None and cell.separation.startswith(
        "damaged: 12 of 12 requests that ran past a captured graph size"
    )


def test_two_conditions_that_set_one_cell_apart_alike_are_told_apart_by_the_other_failing_cells() -> None:
    """prefill-mix: every request after the first wave took a freed slot and was beside a long
    prompt, so both set its damage apart; in the staggered cell only the long prompt does."""
    both = (Condition.JOINED, Condition.FREED_SLOT, Condition.BESIDE_PREFILL)
    mix = [request(i, in_flight=i, conditions=FIRST) for i in range(6)]
    mix += [
        request(i, conditions=(*both, Condition.LONG_PREFILL), noise=0.01 * (i % 3)) for i in range(6, 20)
    ]
    mix += [request(i, lost=0.3, conditions=both) for i in range(20, 32)]
    beside = (Condition.JOINED, Condition.BESIDE_PREFILL)
    staggered = [request(i, conditions=FREED, noise=0.01 * (i % 3)) for i in range(16)]
    staggered += [request(i, lost=0.3, conditions=beside) for i in range(16, 28)]
    # alpha 0.1: the scheduled tests' share of it (SCHEDULE_SHARE) makes these 12-of-32 cells fail
    alone = judge([refill(mix, Schedule.PREFILL_MIX)], tolerance=0.02, alpha=0.1)[0]
    assert alone.separated_by == Condition.JOINED  # on its own: a three-way tie, the first in order
    cells = judge([refill(mix, Schedule.PREFILL_MIX), refill(staggered, Schedule.STAGGERED)], 0.02, 0.1)
    assert [c.separated_by for c in cells] == [Condition.BESIDE_PREFILL, Condition.BESIDE_PREFILL]
