"""Quality at every batch position of every cell, against batch size 1."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from harness.verdict.failures import engine_failure, positions_failure

if TYPE_CHECKING:
    from harness.model.report import CellResult
    from harness.pipeline import RunOutcome


def test_batch_positions(harness_cell_result: CellResult, harness_result: RunOutcome) -> None:
    message = positions_failure(harness_cell_result)
    if message:
        pytest.fail(message, pytrace=False)


def test_engine_wide(harness_result: RunOutcome) -> None:
    engine = harness_result.report.engine_wide
    if engine is None:
        pytest.skip("no engine-wide test: fewer than two batched cells, or no reference summaries")
    message = engine_failure(engine)
    if message:
        pytest.fail(message, pytrace=False)
