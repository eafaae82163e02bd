"""Scoring overlapped with generation: the same report as scoring afterwards, scoring really
runs while the engine still generates, and the run's timing is recorded."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TypedDict

import pytest

import harness.stages.score as score_stage
from harness.config import RunConfig
from harness.model.scores import CellScores
from harness.pipeline import RunOutcome, execute, prepare
from harness.report.build import rounded
from harness.stages.run import CellOutputs, Prepared
from harness.storage.generations import Row
from tests.integration.common import run_options
from tests.unit.noisy_engine import NoisyEngine, write_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data") / "noisy.jsonl")


def _config(tmp: Path, dataset: Path, **options: str | bool) -> RunConfig:
    # overlapped scoring is the fixed design's (a sequential run scores look by look)
    values = run_options(tmp, dataset, "1,2,4,8", "1,2", report="reports", cache=None, looks=1)
    return RunConfig.from_options({**values, **options})


class EngineArgs(TypedDict, total=False):
    """NoisyEngine's keyword arguments."""

    from_position: int
    salt: int
    delay: float


def _prepare(config: RunConfig, engine: NoisyEngine) -> Prepared:
    """prepare() with a plain user engine: it adopts any object with generate(), but harness
    annotates the parameter Engine (the full protocol)."""
    return prepare(config, engine=engine)


def _run(prep: Prepared, *, overlap: bool = True) -> RunOutcome:
    result = execute(prep, overlap=overlap)
    assert isinstance(result, RunOutcome)
    return result


def _both(
    config: RunConfig, engine_args: EngineArgs, monkeypatch: pytest.MonkeyPatch
) -> tuple[RunOutcome, RunOutcome, list[str], list[str]]:
    """The same run overlapped and serial, with the thread that scored each cell."""
    threads: list[str] = []
    real = score_stage.score_cell

    def spy(
        outputs: CellOutputs, base: Sequence[str], references: Sequence[str | None], bs1: Row
    ) -> tuple[CellScores, float]:
        threads.append(threading.current_thread().name)
        return real(outputs, base, references, bs1)

    monkeypatch.setattr(score_stage, "score_cell", spy)
    fast = _run(_prepare(config, NoisyEngine(**engine_args)))
    fast_threads, threads[:] = list(threads), []
    slow = _run(_prepare(config, NoisyEngine(**engine_args)), overlap=False)
    return fast, slow, fast_threads, list(threads)


def _report(result: RunOutcome) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((result.folder / "report.json").read_text(encoding="utf-8"))
    return report


@pytest.mark.parametrize("goldens", [False, True], ids=["baseline-bs1", "baseline-goldens"])
def test_overlapped_scoring_is_bit_identical_to_serial(
    tmp_path: Path, dataset: Path, goldens: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if goldens:  # goldens from another build, so the baseline differs from this run's bs1
        record = _config(tmp_path, dataset, update_goldens=True)
        execute(_prepare(record, NoisyEngine(salt=2)))
    # a shard's report keeps every per-prompt score unrounded (report.json ``scores``)
    fast_run, slow_run, fast_threads, slow_threads = _both(
        _config(tmp_path, dataset, alpha="0.5", shard="1/1"), {"from_position": 1}, monkeypatch
    )
    fast, slow = fast_run.report, slow_run.report
    # every cell scored once, in the worker (no fallback), against the baseline the serial path uses
    assert fast_threads == ["harness-scoring_0"] * len(fast.cells)
    assert slow_threads == ["MainThread"] * len(slow.cells)
    assert fast.timing.scoring_overlapped and not slow.timing.scoring_overlapped
    assert fast.baseline == slow.baseline and fast.goldens == slow.goldens
    assert fast.baseline[1].startswith("goldens" if goldens else "batch size 1")
    assert fast.scores is not None and slow.scores is not None
    assert fast.scores.cells == slow.scores.cells and fast.scores.levels == slow.scores.levels  # every float
    if goldens:
        assert any(v != 1.0 for v in fast.scores.levels[1].agreement)
    assert fast.cells == slow.cells
    assert _report(fast_run)["cells"] == _report(slow_run)["cells"]
    assert _report(fast_run)["verdict"] == "fail"  # degraded positions (and their examples) compared too


def test_cells_are_scored_in_a_worker_while_the_engine_generates(
    tmp_path: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scored: list[tuple[str, str, float]] = []
    real = score_stage.score_cell

    def spy(
        outputs: CellOutputs, base: Sequence[str], references: Sequence[str | None], bs1: Row
    ) -> tuple[CellScores, float]:
        import time

        scored.append((outputs.cell.id, threading.current_thread().name, time.perf_counter()))
        return real(outputs, base, references, bs1)

    monkeypatch.setattr(score_stage, "score_cell", spy)
    engine = NoisyEngine(delay=0.004)
    result = _run(_prepare(_config(tmp_path, dataset), engine))
    assert {name for _, name, _ in scored} == {"harness-scoring_0"}
    assert sorted(cid for cid, _, _ in scored) == sorted(c.cell.id for c in result.report.cells)
    # the first cells were scored before the engine's last call: scoring overlapped generation
    assert min(t for _, _, t in scored) < engine.calls[-1]
    assert sum(1 for _, _, t in scored if t < engine.calls[-1]) >= len(scored) - 2


def test_runs_that_record_goldens_score_afterwards(tmp_path: Path, dataset: Path) -> None:
    result = _run(_prepare(_config(tmp_path, dataset, update_goldens=True), NoisyEngine()))
    assert result.report.goldens_written and not result.report.timing.scoring_overlapped


def test_timing_is_recorded(tmp_path: Path, dataset: Path) -> None:
    engine = NoisyEngine(delay=0.002)
    result = _run(_prepare(_config(tmp_path, dataset), engine))
    t = _report(result)["timing"]
    assert t == {k: v for k, v in dataclasses.asdict(rounded(result.report.timing)).items() if v is not None}
    assert t["engine_calls"] == len(engine.calls) == 24 * 8  # 24 rotation batches x 8 cells
    assert t["engine_generate_s"] >= 0.002 * len(engine.calls)
    assert t["generate_stage_s"] >= t["engine_generate_s"]
    assert t["harness_total_s"] >= t["prepare_s"] + t["generate_stage_s"]
    assert t["scoring_s"] > 0 and t["after_generation_s"] >= 0


def test_a_scoring_failure_surfaces_and_the_worker_stops(
    tmp_path: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> NoReturn:
        raise ValueError("scorer broke")

    monkeypatch.setattr(score_stage, "score_cell", broken)
    with pytest.raises(ValueError, match="scorer broke"):
        execute(_prepare(_config(tmp_path, dataset), NoisyEngine()))
    assert not [t for t in threading.enumerate() if t.name.startswith("harness-scoring")]
