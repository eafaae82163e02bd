"""The engine's build limits against what each cell asks for."""

from __future__ import annotations

import pytest

from harness.diagnosis import limits_failure, limits_unknown


def test_engine_limits(harness_cell_result):
    if limits_unknown(harness_cell_result):
        pytest.skip("the engine records no build limits to check")
    message = limits_failure(harness_cell_result)
    if message:
        pytest.fail(message, pytrace=False)
