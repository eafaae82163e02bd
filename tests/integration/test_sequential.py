"""The sequential design through the whole pipeline: the incident engine's damage is found at
the same positions as the fixed design finds it, at a fraction of the sequences; a rerun takes
every batch from the cache and decides the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import RunConfig
from tests.integration.common import EngineFactory, run_here, run_options


@pytest.mark.slow  # the bundled prompts at batch sizes 1, 4, 8 and beam widths 1, 2, twice
def test_the_incident_stops_early_at_the_fixed_designs_positions_and_resumes_from_the_cache(
    tmp_path: Path, engine_factory: EngineFactory
) -> None:
    engine = str(engine_factory(8, 1))  # the incident: max_beam_width 1, run at beam width 2
    options = run_options(tmp_path, None, "1,4,8", "1,2", goldens="g", max_new_tokens="16", engine=engine)
    fixed = run_here(
        RunConfig.from_options({**options, "looks": 1, "report_dir": str(tmp_path / "fixed")})
    ).report
    looked = run_here(RunConfig.from_options(options)).report
    degraded = {c.id: c.degraded_positions for c in fixed.cells if c.degraded_positions}
    assert degraded == {"bs8-beam2": (4, 5, 6, 7)}  # 8 slots: 8 entries x 2 beams overflow from 4
    assert {c.id: c.degraded_positions for c in looked.cells if c.degraded_positions} == degraded
    assert looked.verdict == fixed.verdict == "fail"
    record = looked.method.sequential
    assert record is not None and fixed.method.sequential is None
    assert record.fixed == fixed.method.sequences and looked.method.sequences == record.spent
    assert record.spent <= 0.5 * record.fixed, record
    assert set(record.decided) == {c.id for c in looked.cells} and min(record.decided.values()) == 1
    folder = next((tmp_path / "r").glob("run-*"))
    for page in ("report.md", "report.html"):
        assert "sequential design (4 looks)" in (folder / page).read_text(encoding="utf-8").lower()
    # a rerun (an interrupted run resumed) takes every batch from the cache and decides the same
    again = run_here(RunConfig.from_options({**options, "report_dir": str(tmp_path / "again")})).report
    assert again.cache.batches_generated == 0 and again.method.sequential == record
    assert [c.degraded_positions for c in again.cells] == [c.degraded_positions for c in looked.cells]
