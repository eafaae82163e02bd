"""Scoring overlapped with generation: the same report as scoring afterwards, scoring really
runs while the engine still generates, and the run's timing is recorded."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest

import harness.stages.score as score_stage
from harness.config import RunConfig
from harness.pipeline import execute, prepare
from harness.report.build import rounded
from tests.unit.noisy_engine import NoisyEngine, write_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data") / "noisy.jsonl")


def _config(tmp: Path, dataset: Path, **options) -> RunConfig:
    return RunConfig.from_options(
        {
            "dataset": str(dataset),
            "batch_sizes": "1,2,4,8",
            "beam_widths": "1,2",
            "report_dir": str(tmp / "reports"),
            "goldens_dir": str(tmp / "goldens"),
            **options,
        }
    )


def _both(config: RunConfig, engine_args: dict, monkeypatch) -> tuple:
    """The same run overlapped and serial, with the thread that scored each cell."""
    threads: list[str] = []
    real = score_stage.score_cell

    def spy(*args):
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(score_stage, "score_cell", spy)
    fast = execute(prepare(config, engine=NoisyEngine(**engine_args)))
    fast_threads, threads[:] = list(threads), []
    slow = execute(prepare(config, engine=NoisyEngine(**engine_args)), overlap=False)
    return fast, slow, fast_threads, list(threads)


def _report(result) -> dict:
    return json.loads((result.report_dir / "report.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("goldens", [False, True], ids=["baseline-bs1", "baseline-goldens"])
def test_overlapped_scoring_is_bit_identical_to_serial(tmp_path, dataset, goldens, monkeypatch):
    if goldens:  # goldens from another build, so the baseline differs from this run's bs1
        record = _config(tmp_path, dataset, update_goldens=True)
        execute(prepare(record, engine=NoisyEngine(salt=2)))
    fast, slow, fast_threads, slow_threads = _both(
        _config(tmp_path, dataset, alpha="0.5"), {"from_position": 1}, monkeypatch
    )
    # every cell scored once, in the worker (no fallback), against the baseline the serial path uses
    assert fast_threads == ["harness-scoring_0"] * len(fast.cells)
    assert slow_threads == ["MainThread"] * len(slow.cells)
    assert fast.timing.scoring_overlapped and not slow.timing.scoring_overlapped
    assert fast.baselines == slow.baselines
    assert fast.baselines[1].source.startswith("goldens" if goldens else "batch size 1")
    assert fast.scores == slow.scores and fast.levels == slow.levels  # every float, exactly
    if goldens:
        assert any(v != 1.0 for v in fast.levels[1].agreement)
    assert fast.cells == slow.cells
    assert _report(fast)["cells"] == _report(slow)["cells"]
    assert _report(fast)["verdict"] == "fail"  # degraded positions (and their examples) compared too


def test_cells_are_scored_in_a_worker_while_the_engine_generates(tmp_path, dataset, monkeypatch):
    scored: list[tuple[str, str, float]] = []
    real = score_stage.score_cell

    def spy(outputs, *args):
        import time

        scored.append((outputs.cell.id, threading.current_thread().name, time.perf_counter()))
        return real(outputs, *args)

    monkeypatch.setattr(score_stage, "score_cell", spy)
    engine = NoisyEngine(delay=0.004)
    result = execute(prepare(_config(tmp_path, dataset), engine=engine))
    assert {name for _, name, _ in scored} == {"harness-scoring_0"}
    assert sorted(cid for cid, _, _ in scored) == sorted(c.cell.id for c in result.cells)
    # the first cells were scored before the engine's last call: scoring overlapped generation
    assert min(t for _, _, t in scored) < engine.calls[-1]
    assert sum(1 for _, _, t in scored if t < engine.calls[-1]) >= len(scored) - 2


def test_runs_that_record_goldens_score_afterwards(tmp_path, dataset):
    result = execute(prepare(_config(tmp_path, dataset, update_goldens=True), engine=NoisyEngine()))
    assert result.goldens_written and not result.timing.scoring_overlapped


def test_timing_is_recorded(tmp_path, dataset):
    engine = NoisyEngine(delay=0.002)
    result = execute(prepare(_config(tmp_path, dataset), engine=engine))
    t = _report(result)["timing"]
    assert t == {k: v for k, v in dataclasses.asdict(rounded(result.timing)).items() if v is not None}
    assert t["engine_calls"] == len(engine.calls) == 24 * 8  # 24 rotation batches x 8 cells
    assert t["engine_generate_s"] >= 0.002 * len(engine.calls)
    assert t["generate_stage_s"] >= t["engine_generate_s"]
    assert t["harness_total_s"] >= t["prepare_s"] + t["generate_stage_s"]
    assert t["scoring_s"] > 0 and t["after_generation_s"] >= 0


def test_a_scoring_failure_surfaces_and_the_worker_stops(tmp_path, dataset, monkeypatch):
    def broken(*args):
        raise ValueError("scorer broke")

    monkeypatch.setattr(score_stage, "score_cell", broken)
    with pytest.raises(ValueError, match="scorer broke"):
        execute(prepare(_config(tmp_path, dataset), engine=NoisyEngine()))
    assert not [t for t in threading.enumerate() if t.name.startswith("harness-scoring")]
