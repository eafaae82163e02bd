"""calibrate on a tiny seeded setting: real engines, real generations, the run's analysis."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.tools.calibrate.run import run_calibration
from harness.tools.calibrate.settings import Settings
from harness.tools.calibrate.table import Outcome, Targets, flight_table, table
from harness.verdict.decide import family_size
from harness.verdict.statistics import min_detectable_drop, per_test_share


def _settings(
    root: Path, *, trials: int, prompts: int, pool: int, max_new_tokens: int, only: tuple[str, ...]
) -> Settings:
    """A small calibration: seed 5, one round, one job; its cache and engines under ``root``."""
    return Settings(
        trials=trials,
        seed=5,
        prompts=prompts,
        pool=pool,
        rounds=1,
        max_new_tokens=max_new_tokens,
        jobs=1,
        cache_dir=root / "cache",
        work_dir=root / "engines",
        only=only,
        looks=1,  # the fixed design (the sequential one stops too early to show anything on 12 prompts)
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, list[Outcome]]:
    root = tmp_path_factory.mktemp("calibrate")
    settings = _settings(
        root, trials=20, prompts=12, pool=16, max_new_tokens=12, only=("healthy", "full-batch")
    )
    return settings, run_calibration(settings, say=lambda line: None)[0]


def test_rates_and_table(tiny: tuple[Settings, list[Outcome]]) -> None:
    settings, outcomes = tiny
    by = {o.model.name: o for o in outcomes}
    assert by["healthy"].flagged == 0
    assert by["full-batch"].flagged == 20 and by["full-batch"].exact == 20
    assert by["full-batch"].named == 20
    lines, ok = table(outcomes, settings, Targets())
    assert ok and lines[-1].startswith(
        "calibrate: false alarms 0.0% healthy; worst detection 100.0% (full-batch)"
    )
    assert "12 prompts drawn from a pool of 16" in "\n".join(lines)


def test_same_seed_same_results_and_a_missed_target_is_reported(tiny: tuple[Settings, list[Outcome]]) -> None:
    settings, outcomes = tiny
    again, _ = run_calibration(settings, say=lambda line: None)  # generations from the cache
    assert [(o.flagged, o.exact, o.named) for o in again] == [(o.flagged, o.exact, o.named) for o in outcomes]
    lines, ok = table(outcomes, settings, Targets(exact=1.01))
    assert not ok and lines[-1].endswith("TARGETS MISSED") and "MISSED" in lines[2]


def test_a_horizon_decides_over_the_first_share_of_each_rotation(
    tiny: tuple[Settings, list[Outcome]],
) -> None:
    """--horizon 0.25: every cell's first 3 of 12 rotation batches (bs8: 24 sequences, bs4: 12)
    and batch size 1 for the 10 prompts they seat, against the fixed design's 12 x 12 + 12; on 3
    prompts per position the full-batch corruption the whole rotation finds in 20 of 20 trials
    is found less often, at the whole alpha."""
    settings, _ = tiny
    outcomes, _ = run_calibration(replace(settings, horizon=0.25), say=lambda line: None)
    by = {o.model.name: o for o in outcomes}
    assert set(by["full-batch"].cost) == {(3 * 8 + 3 * 4 + 10) / (12 * 12 + 12)}
    assert 0 < by["full-batch"].flagged < 20 and by["healthy"].flagged == 0
    lines, _ = table(outcomes, replace(settings, horizon=0.25), Targets())
    assert "--horizon 0.25: each full-rotation model decided over only the first 25.0%" in "\n".join(lines)


@pytest.mark.parametrize("extra", [["--looks", "4"], ["--looks", "1", "--rotation", "sparse"]])
def test_a_horizon_outside_the_fixed_full_rotation_is_refused_in_one_line(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["calibrate", "--horizon", "0.4", *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "give --looks 1" in err and "Traceback" not in err


def test_cli_refuses_unknown_models_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--only", "gremlins"]) == 2
    err = capsys.readouterr().err
    assert "--only gremlins: unknown model(s) gremlins" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_minimum_detectable_drop_matches_the_documented_table() -> None:
    """docs/method.md's table: the default grid's Holm family of 136 tests."""
    from harness.config.basics import DEFAULT_BEAM_WIDTHS
    from harness.plan import grid

    assert family_size(grid(None, DEFAULT_BEAM_WIDTHS, 8), references=True) == 136
    assert min_detectable_drop(
        64, 0.1, tolerance=0.02, alpha=0.01, share=per_test_share(136, pooled=True)
    ) == pytest.approx(0.081, abs=5e-4)
    assert min_detectable_drop(
        512, 0.3, tolerance=0.02, alpha=0.01, share=per_test_share(136, pooled=True)
    ) == pytest.approx(0.082, abs=5e-4)


@pytest.mark.slow  # a sweep's every batch size over 40 prompts
def test_a_sweep_model_reports_its_boundary(tmp_path: Path) -> None:
    """The graph ladder swept to 8: trials at the sweep's cost (each prompt at one position
    per size) find the first failing size, 3, and the damaged positions per size."""
    settings = _settings(tmp_path, trials=10, prompts=40, pool=40, max_new_tokens=16, only=("graph-ladder",))
    [o], _ = run_calibration(settings, say=lambda line: None)
    assert (
        family_size(o.model.design(), references=True) == 3 * 35 + 7 + 1
    )  # sizes 2..8 at beam width 1, and the engine-wide test
    assert o.model.boundary(1) == 3
    assert o.boundary == o.flagged == 10 and o.named == 10
    lines, ok = table([o], settings, Targets())
    assert "bs2-8-beam1" in lines[1] and lines[1].endswith("boundary >= 95%, sequences <= 1.5x: ok")
    cols = lines[1].split()
    at = cols.index("bs2-8-beam1")
    assert cols[at + 3 : at + 7] == ["100.0%", "100.0%", "0.0%", "100.0%"]  # exact .. bound.
    assert cols[at + 7].endswith("x")  # the sequences the follow-up spent over the fixed sweep's
    assert "worst sweep boundary 100.0% (graph-ladder)" in lines[-1]


def test_a_sweep_too_large_for_its_prompts_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--sweep-to", "16", "--only", "graph-ladder"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "give --prompts 80" in err


@pytest.mark.parametrize("to", [8, 16, 32])
def test_the_sweep_models_truth_is_what_the_emulator_damages(to: int) -> None:
    """calibrate writes the damaged positions of the threshold faults out on its own; the
    emulator's faults damage exactly those entries at every size and beam width."""
    from harness.engines.emulator.faults import Fault, FaultKind
    from harness.tools.calibrate.models import buffer_damage, ladder_damage

    ladder, buffer = Fault(FaultKind.GRAPH_LADDER), Fault(FaultKind.BEAM_BUFFER)
    for size in range(1, to + 1):
        prompts = [f"p{i}" for i in range(size)]
        assert ladder.dead_entries(prompts, to) == set(ladder_damage(size))
        for width in (1, 2, 4):
            assert buffer.dead_entries(prompts, to, width) == set(buffer_damage(size, width, to))
    assert ladder_damage(5) == {4} and ladder_damage(8) == set() and ladder_damage(3) == {2}
    assert buffer_damage(8, 2, 8) == {4, 5, 6, 7} and buffer_damage(4, 2, 8) == set()


def test_in_flight_faults_fail_the_schedules_named_by_their_condition(tmp_path: Path) -> None:
    """One round of 32 prompts per model at C 8, on 30% drift (and the drifting twin's round,
    which says what drift alone damages): a refilled slot's stale state fails the cold
    schedules, named by the freed slots; a warm cache serving damaged blocks fails the warm
    pass, named by the cache."""
    only = ("stale-slot+drift", "warm-cache+drift")
    base = _settings(tmp_path, trials=20, prompts=32, pool=32, max_new_tokens=16, only=only)
    settings = replace(base, flight_rounds=1)
    bulk, flights = run_calibration(settings, say=lambda line: None)
    assert bulk == []  # in-flight models on drift have no bulk cells of their own
    by = {o.model.name: o for o in flights}
    assert list(by) == list(only)  # the twin was driven, not reported
    for o in flights:
        assert o.detected == o.named == o.exact == 20 and o.wrong == 0, o
    lines, ok = flight_table(flights, settings, Targets())
    assert ok and lines[2].startswith("stale state on a refilled slot (in flight) + 30% drift")
    assert lines[2].endswith("detected >= 95%, exact >= 95%: ok")
    assert lines[-1].startswith("calibrate in flight: false alarms n/a; worst detection 100.0%")
