"""Every beam is kept in the raw results (generations.jsonl), from the engine and from the cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.pipeline import RunOutcome
from tests.integration.common import EngineFactory, run_here, run_options


def _rows(result: RunOutcome) -> list[dict[str, Any]]:
    path = result.folder / "generations.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_all_beams_are_kept_and_survive_the_cache(
    tmp_path: Path, small_dataset: Path, engine_factory: EngineFactory
) -> None:
    options = run_options(tmp_path, small_dataset, "2", "1,2", goldens="g", max_new_tokens="8")
    config = RunConfig.from_options({**options, "engine": str(engine_factory(2, 2))})
    first = _rows(run_here(config))
    beam_rows = [r for r in first if r["cell"].endswith("beam2")]
    assert beam_rows and all(len(r["beams"]) == 2 and r["beams"][0] == r["output"] for r in beam_rows)
    assert all("beams" not in r for r in first if r["cell"].endswith("beam1"))
    second = run_here(config)
    assert second.report.cache is not None  # the cache is on
    assert second.report.cache.batches_generated == 0
    assert _rows(second) == first
