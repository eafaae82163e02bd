"""Requests sent into a running batch (in-flight schedules), against batch size 1."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from harness.model.vocab import Verdict
from harness.verdict.failures import schedule_failure

if TYPE_CHECKING:
    from harness.model.schedule import ScheduledCell


def test_schedules(harness_schedule_result: ScheduledCell) -> None:
    if harness_schedule_result.verdict == Verdict.NOT_APPLICABLE:
        pytest.skip(f"{harness_schedule_result.id}: not applicable: {harness_schedule_result.message}")
    message = schedule_failure(harness_schedule_result)
    if message:
        pytest.fail(message, pytrace=False)
