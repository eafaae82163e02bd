"""The schedule axis through the whole pipeline: requests sent into a running batch by the
bundled emulator's in-flight scheduler and by a plug-in's generate_async; a fault that only
refilled slots suffer fails the scheduled cells, names the freed slots, and leaves the bulk cells
passing; an engine without an in-flight path gets cells that are not applicable, never passed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from harness.config import RunConfig
from harness.engines.emulator.build import build_engine, build_limits
from harness.engines.emulator.faults import parse_fault
from harness.errors import ConfigError
from harness.model.report import Report
from harness.model.vocab import Schedule, Verdict
from harness.report.audit import audit
from harness.verdict.statistics import SCHEDULE_SHARE
from tests.integration.common import run_here, run_options

SCHEMA = Path(__file__).resolve().parents[2] / "harness" / "report" / "report.schema.json"


def _run(tmp: Path, dataset: Path | None, engine: str, **more: object) -> tuple[Report, dict[str, Any], Path]:
    options = {**run_options(tmp, dataset, "1,4", "1", cache=False, max_new_tokens="24", looks=1), **more}
    outcome = run_here(RunConfig.from_options({**options, "engine": engine}))
    data = json.loads((outcome.folder / "report.json").read_text())
    jsonschema.validate(data, json.loads(SCHEMA.read_text()))
    assert audit(outcome.report) == []  # every verdict, scheduled ones included, follows from its figures
    return outcome.report, data, outcome.folder


@pytest.mark.slow  # generates the bulk grid and four schedules on the emulator
def test_a_stale_slot_fails_the_schedules_and_names_the_freed_slots_while_bulk_passes(
    tmp_path: Path, small_dataset: Path
) -> None:
    engine = build_engine(
        tmp_path / "engine",
        build_limits(max_batch_size=4, max_beam_width=1),
        fault=parse_fault("stale-slot", max_batch_size=4),
    )
    # the bundled 64 prompts: on 16, staggered's 12 refilled requests (drop 0.28) miss alpha
    report, data, folder = _run(tmp_path, None, str(engine))
    assert all(c.verdict == Verdict.PASS for c in report.cells)  # bulk cells never refill a slot
    cells = {c.schedule: c for c in report.schedules}
    for schedule in (Schedule.STAGGERED, Schedule.REFILL, Schedule.PREFILL_MIX):
        cell = cells[schedule]
        assert cell.verdict == Verdict.FAIL and cell.peak == 4, cell.message
        assert cell.separation is not None and "requests that took a freed slot; 0 of" in cell.separation
        fresh = [r for r in cell.requests if not r.slot_reused]
        assert fresh and not any(r.damaged for r in fresh)  # the first occupant of each slot is whole
    assert report.verdict == Verdict.FAIL and data["schedules"][0]["schedule"] == "staggered"
    assert "## Schedules: requests sent into a running batch" in (folder / "report.md").read_text()
    assert "refill-c4-beam1: every request" in (folder / "report.html").read_text()


@pytest.mark.slow
def test_a_healthy_engine_passes_every_schedule_with_the_requests_overlapping(
    tmp_path: Path, small_dataset: Path
) -> None:
    engine = build_engine(tmp_path / "engine", build_limits(max_batch_size=4, max_beam_width=1))
    report, _, _ = _run(tmp_path, small_dataset, str(engine))
    assert report.verdict == Verdict.PASS and len(report.schedules) == 4
    for cell in report.schedules:
        assert cell.verdict == Verdict.PASS and cell.changed == 0, cell.message
        assert cell.schedule == Schedule.WARM or (cell.overlap or 0) >= 0.5
    warm = next(c for c in report.schedules if c.schedule == Schedule.WARM)
    assert all(r.cached_tokens for r in warm.requests) and warm.cache  # said what it did


def test_a_rerun_replays_the_scheduled_passes_from_the_cache_and_no_cache_sends_them_again(
    tmp_path: Path, small_dataset: Path
) -> None:
    engine = str(build_engine(tmp_path / "engine", build_limits(max_batch_size=4, max_beam_width=1)))
    cached = {"no_cache": False, "cache_dir": str(tmp_path / "cache")}
    first, _, _ = _run(tmp_path, small_dataset, engine, **cached)
    second, data, folder = _run(tmp_path, small_dataset, engine, **cached)
    assert not any(c.replayed for c in first.schedules) and first.cache.passes_from_cache == 0
    assert all(c.replayed for c in second.schedules) and second.cache.passes_from_cache == 4
    assert [replace(c, replayed=False, message="") for c in second.schedules] == [
        replace(c, message="") for c in first.schedules
    ]  # the same requests, timings, conditions, scores and verdicts
    assert data["cache"]["passes_from_cache"] == 4 and data["schedules"][0]["replayed"] is True
    assert "Replayed from the generation cache" in (folder / "report.md").read_text()
    html = (folder / "report.html").read_text()
    assert "(replayed from the generation cache; --no-cache sends them again)" in html
    third, _, _ = _run(tmp_path, small_dataset, engine)  # --no-cache
    assert not any(c.replayed for c in third.schedules) and third.cache.passes_from_cache == 0


def test_a_plug_in_with_generate_async_runs_the_schedules_and_a_stale_slot_fails_them(
    tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tests.integration.async_engine.STALE", True)
    report, _, _ = _run(tmp_path, small_dataset, "tests.integration.async_engine:AsyncToyEngine")
    assert all(c.verdict == Verdict.PASS for c in report.cells)
    first, *later = report.schedules  # the plug-in's slots outlive a schedule: all reused later
    assert first.schedule == Schedule.STAGGERED and first.verdict == Verdict.FAIL
    assert first.separation == "damaged: 12 of 12 requests that took a freed slot; 0 of 4 others"
    assert all(c.verdict == Verdict.FAIL and all(r.slot_reused for r in c.requests) for c in later[:2])
    assert {r.slot for r in first.requests} == {0, 1, 2, 3}
    assert report.method.schedule_share == SCHEDULE_SHARE  # its tests hold their share of the run's family
    own = replace(report, schedules=tuple(replace(c, groups=()) for c in report.schedules))
    assert any(": groups ()" in line for line in audit(own))  # a test left out of the family is listed
    unshared = replace(report, method=replace(report.method, schedule_share=None))
    assert any(
        line.startswith("method.schedule_share None, but these scheduled cells ran")
        for line in audit(unshared)
    )


def test_an_engine_without_an_in_flight_path_gets_cells_that_are_not_applicable(
    tmp_path: Path, small_dataset: Path
) -> None:
    report, _, _ = _run(tmp_path, small_dataset, "tests.integration.toy_engine:ToyEngine")
    assert report.verdict == Verdict.PASS and len(report.schedules) == 4
    assert all(c.verdict == Verdict.NOT_APPLICABLE for c in report.schedules)
    assert "defines no generate_async(prompt, settings)" in report.schedules[0].message
    # the share is the design's, asked for before the engine said it has no in-flight path
    assert report.method.schedule_share == SCHEDULE_SHARE


def test_schedules_none_runs_the_bulk_cells_only_and_a_wrong_name_is_one_line(
    tmp_path: Path, small_dataset: Path
) -> None:
    report, _, _ = _run(tmp_path, small_dataset, "tests.integration.toy_engine:ToyEngine", schedules="none")
    assert report.schedules == () and report.method.schedule_share is None  # bulk tests: all of alpha
    with pytest.raises(
        ConfigError, match=r"--schedules 'refil': expected a comma-separated list of staggered"
    ):
        RunConfig.from_options({"schedules": "refil"})
