"""--sweep on emulator engines with the two threshold faults of issue 26: every batch size up to
the engine's max_batch_size, each prompt once per size, and the boundary per beam width."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.config import RunConfig
from harness.engines.emulator.build import build_engine, build_limits
from harness.engines.emulator.faults import Fault, FaultKind
from harness.errors import ConfigError
from harness.model.vocab import FindingKind
from harness.report.audit import audit
from tests.integration.common import run_here, run_options


def _sweep(
    tmp_path: Path, engine: Path, beams: str
) -> tuple[dict[int, tuple[int | None, int | None, str]], dict[str, FindingKind | None]]:
    options = run_options(
        tmp_path, None, None, beams, goldens="g", cache=False, engine=str(engine), max_new_tokens=24
    )
    config = RunConfig.from_options({**options, "sweep": True})
    assert config.rotation == "sparse"
    result = run_here(config)
    assert sorted({c.cell.batch_size for c in result.report.cells}) == list(range(1, 9))
    report = result.report
    causes = {c.id: c.pattern for c in report.cells if c.verdict == "fail"}
    return {b.beam_width: (b.last_passing, b.first_failing, b.message) for b in report.boundaries}, causes


@pytest.mark.slow  # 8 batch sizes over the 64 bundled prompts, once each
def test_a_cuda_graph_ladder_is_found_between_the_powers_of_two(tmp_path: Path) -> None:
    """Captured sizes 1, 2, 4, 8 pass; 3 (padded to 4) and 5-7 (padded to 8) damage their last
    entries: the default grid 1, 2, 4, 8 never sees it."""
    engine = build_engine(
        tmp_path / "ladder",
        build_limits(max_batch_size=8, max_beam_width=1),
        fault=Fault(FaultKind.GRAPH_LADDER),
    )
    found, causes = _sweep(tmp_path, engine, "1")
    [(last, first, said)] = found.values()
    assert (last, first) == (2, 3)
    assert (
        said == "beam 1: batch sizes 1, 2 pass; fails from 3 (positions 2, 4–6); batch sizes 4, 8 pass again"
    )
    assert causes == {f"bs{b}-beam1": "graph-ladder" for b in (3, 5, 6, 7)}


@pytest.mark.slow
def test_a_buffer_without_the_beam_factor_fails_from_its_threshold(tmp_path: Path) -> None:
    """8 slots for 8 x 2 beams: greedy passes everywhere, beam 2 fails from batch size 5."""
    engine = build_engine(
        tmp_path / "buffer",
        build_limits(max_batch_size=8, max_beam_width=2),
        fault=Fault(FaultKind.BEAM_BUFFER),
    )
    found, causes = _sweep(tmp_path, engine, "1,2")
    assert found[1][:2] == (8, None)
    assert found[2] == (4, 5, "beam 2: batch sizes 1–4 pass; fails from 5 (positions 4–7)")
    assert causes == {f"bs{b}-beam2": "beam-buffer" for b in (5, 6, 7, 8)}


def test_a_sweep_needs_a_max_batch_size_or_a_bound(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--sweep tests every batch size .* drop --batch-sizes"):
        RunConfig.from_options({"sweep": True, "batch_sizes": "1-4"})


@pytest.mark.slow  # 12 batch sizes over the 64 bundled prompts, and a follow-up
def test_one_cut_slot_too_thin_for_the_screen_is_found_by_the_follow_up(tmp_path: Path) -> None:
    """Every output at position 9 of batch size 11 loses its second half, on an engine that
    drifts: the sweep seats 5-6 prompts there, which its screen does not flag; the follow-up
    looks again at that cell, over new prompts, and names exactly that position, at well under
    half the screen's cost; the reports say what it spent."""
    from harness.engines.emulator.drift import Drift

    engine = build_engine(
        tmp_path / "cut",
        build_limits(max_batch_size=12, max_beam_width=1),
        fault=Fault(FaultKind.SLOT_CUT, batch=11, position=9, keep=0.5),
        drift=Drift(rate=0.3),
    )
    options = run_options(
        tmp_path, None, None, "1", goldens="g", cache=False, engine=str(engine), max_new_tokens=24
    )
    report = run_here(RunConfig.from_options({**options, "sweep": True})).report
    failed = {c.id: c.degraded_positions for c in report.cells if c.verdict == "fail"}
    assert failed == {"bs11-beam1": (9,)}
    [cell] = [c for c in report.cells if c.id == "bs11-beam1"]
    screen, again = cell.positions[9], cell.positions[9].follow_up
    assert not any(
        t is not None and t.flagged for t in (screen.position_test, screen.quality_test, screen.change_test)
    )
    assert again is not None and again.degraded and again.n >= 10
    follow = report.method.follow_up
    assert follow is not None and "bs11-beam1" in follow.rounds
    assert 0 < follow.spent <= follow.budget and report.method.sequences == 803 + follow.spent
    assert "the follow-up confirmed position 9" in cell.message
    folder = next((tmp_path / "r").glob("run-*"))
    for page in ("report.md", "report.html"):
        assert "looked again at bs11-beam1" in (folder / page).read_text(encoding="utf-8")
    # the audit corrects the follow-up's tests in their own family: edit a flag, it is listed
    assert audit(report) == []
    cleared = dataclasses.replace(
        again, degraded=False, position_test=None, quality_test=None, change_test=None
    )
    edited = dataclasses.replace(
        cell,
        positions=tuple(
            dataclasses.replace(p, follow_up=cleared) if p.position == 9 else p for p in cell.positions
        ),
    )
    found = audit(
        dataclasses.replace(report, cells=tuple(edited if c.id == cell.id else c for c in report.cells))
    )
    assert any("bs11-beam1 position 9: degraded true, but its tests say false" in line for line in found), (
        found
    )
