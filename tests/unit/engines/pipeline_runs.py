"""Whole-pipeline runs on a TEST DOUBLE's engine, as the engine-adapter tests start them: the
bundled tokenizer, 16 new tokens, no cache, reports and goldens under the test's folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config import RunConfig
from tests.doubles.trtllm_common import BUNDLED_MODEL
from tests.integration.common import run_options

if TYPE_CHECKING:
    from harness.pipeline import RunOutcome


def run_config(tmp_path: Path, dataset: Path, engine: Path, **extra: object) -> RunConfig:
    """The run of ``engine`` on ``dataset``; ``extra`` adds options (batch sizes, backend, ...)."""
    values = run_options(
        tmp_path, dataset, None, None, report="reports", cache=False, max_new_tokens=16, looks=1
    )
    values.update(engine=str(engine), tokenizer=str(BUNDLED_MODEL), **extra)
    return RunConfig.from_options(values)


def run_pipeline(config: RunConfig) -> RunOutcome:
    """``harness.pipeline.run`` in this one process: rank 0's outcome."""
    from harness.pipeline import RunOutcome, run

    result = run(config)
    assert isinstance(result, RunOutcome)  # one process: rank 0
    return result


def written_report(tmp_path: Path) -> dict[str, Any]:
    """The report.json that the run under ``tmp_path`` wrote."""
    report: dict[str, Any] = json.loads(next((tmp_path / "reports").glob("*/report.json")).read_text())
    return report
