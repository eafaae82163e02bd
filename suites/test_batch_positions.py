"""Quality at every batch position of every cell, against batch size 1."""

from __future__ import annotations

import pytest

from harness.verdict.failures import positions_failure


def test_batch_positions(harness_cell_result, harness_result):
    message = positions_failure(harness_cell_result)
    if message:
        pytest.fail(message, pytrace=False)
