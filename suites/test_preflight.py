"""The engine's build limits against what each cell asks for (needs no generation)."""

from __future__ import annotations

import pytest

from harness.verdict.failures import limits_failure, limits_unknown


def test_engine_limits(harness_cell_checks):
    if limits_unknown(harness_cell_checks):
        pytest.skip("the engine records no build limits to check")
    message = limits_failure(harness_cell_checks)
    if message:
        pytest.fail(message, pytrace=False)
