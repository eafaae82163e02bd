"""The engine's build limits against what each cell asks for (needs no generation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from harness.verdict.failures import limits_failure, limits_unknown

if TYPE_CHECKING:
    from harness.model.limits import LimitCheck


def test_engine_limits(harness_cell_checks: tuple[LimitCheck, ...]) -> None:
    if limits_unknown(harness_cell_checks):
        pytest.skip("the engine records no build limits to check")
    message = limits_failure(harness_cell_checks)
    if message:
        pytest.fail(message, pytrace=False)
