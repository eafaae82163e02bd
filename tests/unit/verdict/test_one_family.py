"""The scheduled cells' tests and the bulk cells' tests are one weighted Holm family at the
run's alpha (harness.verdict.statistics.joint_holm, harness.verdict.decide)."""

from __future__ import annotations

import random

import pytest

from harness.model.cell import Cell
from harness.model.schedule import ServedRequest
from harness.model.vocab import Condition, Schedule, Verdict
from harness.verdict.decide import Decision, decide
from harness.verdict.schedules import Drive, Flights
from harness.verdict.statistics import SCHEDULE_SHARE, holm, joint_holm
from tests.unit.verdict.score_tables import levels_of, scored

ALPHA = 0.01
CELL = Cell(4, 1)
DESIGN = (Cell(1, 1), CELL)


def _request(rank: int, lost: float) -> ServedRequest:
    conditions = (Condition.FIRST_WAVE,) if rank < 4 else (Condition.JOINED, Condition.FREED_SLOT)
    return ServedRequest(
        document=f"d{rank}",
        rank=rank,
        sent=rank * 0.1,
        answered=rank * 0.1 + 1,
        in_flight=min(rank, 3),
        slot=rank % 4,
        slot_reused=rank >= 4,
        conditions=conditions,
        agreement=1.0 - lost,
        agreement_bs1=1.0,
        quality=0.5 - lost,
        quality_bs1=0.5,
        changed=lost > 0,
    )


def _drive(lost: float) -> Drive:
    """A refill cell of 32 requests, those after the first wave losing ``lost``."""
    return Drive(
        Schedule.REFILL, 1, 4, tuple(_request(i, lost if i >= 4 else 0.0) for i in range(32)), peak=4
    )


def _decide(position_loss: float, flights: Flights | None) -> Decision:
    """A one-cell run whose position 2 loses ``position_loss`` on a third of its prompts."""
    rng = random.Random(7)
    q1 = [rng.uniform(0.45, 0.85) for _ in range(48)]
    quality = [
        [q - (position_loss if p == 2 and i % 3 == 0 else 0.0) for i, q in enumerate(q1)] for p in range(4)
    ]
    agreement = [
        [0.6 if p == 2 and i % 3 == 0 and position_loss else 1.0 for i in range(48)] for p in range(4)
    ]
    return decide(
        (CELL,),
        dict([scored(CELL, agreement, quality)]),
        {1: levels_of(q1)},
        {},
        None,
        design=DESIGN,
        tolerance=0.02,
        alpha=ALPHA,
        flights=flights,
    )


def test_without_scheduled_tests_the_family_is_holms() -> None:
    p, w = [0.001, 0.02, 0.5, 1.0], [1.0, 1.0, 1.0, 1.0]
    assert joint_holm(p, w, [], 0.0) == (holm(p, w), [])
    with pytest.raises(ValueError):
        joint_holm(p, w, [0.01], 0.0)  # a scheduled test must hold a share of alpha


def test_one_family_keeps_the_run_false_alarm_rate_at_alpha_where_two_families_double_it() -> None:
    """Under the global null (every p-value uniform): the run fails at most alpha of the time in
    one family; corrected as two families at alpha each, it fails about twice as often."""
    rng = random.Random(11)
    alpha, trials, one, two = 0.05, 4000, 0, 0
    for _ in range(trials):
        bulk = [rng.random() for _ in range(40)]
        flight = [rng.random() for _ in range(8)]
        b, s = joint_holm(bulk, [1.0] * 40, flight, SCHEDULE_SHARE)
        one += min(b + s) < alpha
        two += min(holm(bulk)) < alpha or min(holm(flight)) < alpha
    assert one / trials <= alpha + 0.01
    assert two / trials > 1.6 * alpha


def test_a_scheduled_test_is_corrected_with_the_runs_bulk_tests() -> None:
    decision = _decide(0.0, Flights((_drive(0.3),), share=SCHEDULE_SHARE))
    (cell,) = decision.scheduled
    assert cell.verdict == Verdict.FAIL and decision.verdict == Verdict.FAIL
    assert decision.schedule_share == SCHEDULE_SHARE
    tests = [t for t in (cell.test, *[g.test for g in cell.groups]) if t is not None]
    alone = holm([t.p_value for t in tests])  # its own family, as before: more liberal
    assert all(t.p_adjusted is not None and t.p_adjusted >= a for t, a in zip(tests, alone))
    assert any(t.p_adjusted is not None and t.p_adjusted > a for t, a in zip(tests, alone))


def test_a_scheduled_test_that_fails_passes_its_share_to_the_bulk_tests() -> None:
    """Holm's step-down over one family: once the scheduled tests reject, their share of alpha
    goes to the bulk tests, which two families at split alphas would never give them."""
    clean = _decide(0.25, Flights((_drive(0.0),), share=SCHEDULE_SHARE))
    failing = _decide(0.25, Flights((_drive(0.3),), share=SCHEDULE_SHARE))
    bulk = [s.position_test for s in clean.cells[0].positions]
    after = [s.position_test for s in failing.cells[0].positions]
    assert failing.scheduled[0].verdict == Verdict.FAIL and clean.scheduled[0].verdict == Verdict.PASS
    pairs = [(a.p_adjusted, b.p_adjusted) for a, b in zip(bulk, after) if a is not None and b is not None]
    assert pairs and all(x is not None and y is not None and y <= x for x, y in pairs)
    assert any(x is not None and y is not None and y < x for x, y in pairs)


def test_a_run_without_scheduled_cells_gives_the_bulk_tests_all_of_alpha() -> None:
    none = _decide(0.25, None)
    kept = _decide(0.25, Flights(share=SCHEDULE_SHARE))  # planned, none made: a clean test holds it
    assert none.schedule_share is None and kept.schedule_share == SCHEDULE_SHARE
    pairs = [
        (a.position_test.p_adjusted, b.position_test.p_adjusted)
        for a, b in zip(none.cells[0].positions, kept.cells[0].positions)
        if a.position_test is not None and b.position_test is not None
    ]
    # each bulk test holds 1 - SCHEDULE_SHARE of the weight it held: its adjusted p at least
    # that much larger (Holm's first step: exactly)
    assert pairs and all(
        x is not None and y is not None and y >= min(1.0, x / (1 - SCHEDULE_SHARE)) - 1e-12 for x, y in pairs
    )


def test_the_audit_lists_scheduled_cells_corrected_in_a_family_of_their_own() -> None:
    from harness.verdict.schedules import decided_again, examine, family_p_values, settle

    drives = [_drive(0.3), _drive(0.0)]
    examined = examine(drives, 0.02)
    one = settle(examined, joint_holm([], [], family_p_values(examined), SCHEDULE_SHARE)[1], 0.02, ALPHA)
    assert decided_again(one, 0.02, ALPHA) == []
    own = settle(examined, holm(family_p_values(examined)), 0.02, ALPHA)  # as before: its own family
    assert any(line.startswith("refill-c4-beam1: test") for line in decided_again(own, 0.02, ALPHA))
