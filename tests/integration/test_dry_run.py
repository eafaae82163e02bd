"""What a run will cost and check, before anything loads: ``python -m harness run --dry-run``,
``pytest suites/ --collect-only`` and the limits suite on a TensorRT-LLM engine folder on a
machine without TensorRT-LLM (config.json, the dataset and the tokenizer files are enough)."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.__main__ as cli
from tests.doubles.trtllm_common import BUNDLED_MODEL, make_engine_dir
from tests.integration.common import Suites, grid_options, run_here
from tests.processes import SUITES


def _no_tensorrt_llm() -> None:
    import importlib.util

    assert importlib.util.find_spec("tensorrt_llm") is None  # as on a CPU box or a CI runner


def test_a_dry_run_on_a_tensorrt_llm_engine_prints_plan_limits_and_estimate(
    tmp_path: Path, small_dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_tensorrt_llm()
    engine = make_engine_dir(tmp_path / "engine", max_beam_width=1, max_batch_size=8, with_tokenizer=True)
    code = cli.main(
        [
            "run",
            "--dry-run",
            "--engine",
            str(engine),
            *grid_options(small_dataset, "1,4", "1,2"),
            "--max-new-tokens",
            "32",
            "--throughput",
            "2.5",
            "--report-dir",
            str(tmp_path / "r"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1  # beam 2 exceeds max_beam_width 1
    lines = out.splitlines()
    # 16 prompts: bs1 16 + bs4 64, at both beam widths
    assert lines[0].startswith("plan: 160 sequences in 64 batches over 4 cells under test")
    assert lines[1] == (
        "schedules: staggered, refill, prefill-mix, warm at concurrency 4: up to 128 more requests "
        "(64 per beam width its in-flight path decodes), sent in flight; a rerun of the same engine "
        "replays them from the generation cache, as it does batches (--schedules none: bulk cells only)"
    )
    assert lines[2] == "cells: bs1-beam1, bs4-beam1, bs1-beam2, bs4-beam2"
    assert lines[3] == (
        "tokens: at most 5,120 generated (32 per sequence), 7,680 counting every "
        "beam; 2,048 decode steps (64 batches x 32)"
    )
    assert "build limits (unified config.json, TensorRT-LLM 0.13.0; prompt lengths: tokenizer " in out
    assert "2 exceeded" in out and "  bs4-beam2: num_beams 2 exceeds the engine's max_beam_width 1" in out
    assert lines[-1] == (
        "estimate: about 1 min 04 s of generation at --throughput 2.5 sequences/s "
        "(at most: --looks stops each cell once its answer is known)"
    )
    assert not (tmp_path / "r").exists()  # nothing written


def test_the_estimate_can_come_from_a_previous_run(tmp_path: Path, small_dataset: Path) -> None:
    from harness.config import DatasetOptions, RunConfig
    from harness.report.estimate import estimate_line
    from tests.integration.toy_engine import ToyEngine

    previous = run_here(
        RunConfig(
            data=DatasetOptions(dataset=str(small_dataset)),
            batch_sizes=(1, 4),
            beam_widths=(1,),
            no_cache=True,
            report_dir=tmp_path / "runs",
        ),
        engine=ToyEngine(None),
    )
    folder = previous.folder
    rate = previous.report.method.sequences / round(previous.report.timing.engine_generate_s, 4)
    line = estimate_line(RunConfig(throughput=str(folder)), 1000)
    assert line.startswith("estimate: about ") and f"at {rate:.2f} sequences/s, the rate of {folder}" in line

    report = tmp_path / "report.json"
    report.write_text("{}")
    with pytest.raises(Exception, match="--throughput .*neither a number"):
        estimate_line(RunConfig(throughput=str(report)), 100)
    with pytest.raises(Exception, match="must be more than 0"):
        estimate_line(RunConfig(throughput="0"), 100)


def test_preflight_suite_checks_a_tensorrt_llm_engine_without_tensorrt_llm(
    tmp_path: Path, small_dataset: Path, suites: Suites
) -> None:
    _no_tensorrt_llm()
    engine = make_engine_dir(tmp_path / "engine", max_beam_width=1, max_batch_size=8)
    proc = suites(
        "--engine",
        str(engine),
        "--tokenizer",
        str(BUNDLED_MODEL),
        *grid_options(small_dataset, "4,8", "1,4"),
        "-v",
        "--report-dir",
        str(tmp_path / "r"),
        suite=SUITES / "test_preflight.py",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "test_engine_limits[bs8-beam1] PASSED" in out
    assert "test_engine_limits[bs8-beam4] FAILED" in out and "exceeds the engine's max_beam_width 1" in out
    assert "the engine is not loaded: only its build limits are checked" in out
    assert "needs TensorRT-LLM" not in out and "Traceback" not in out
    assert not (tmp_path / "r").exists()


def test_collect_only_prints_the_plan_without_loading_the_engine(
    tmp_path: Path, small_dataset: Path, suites: Suites
) -> None:
    _no_tensorrt_llm()
    engine = make_engine_dir(tmp_path / "engine", max_beam_width=4, max_batch_size=8, with_tokenizer=True)
    proc = suites(
        "--collect-only",
        "-q",
        "--engine",
        str(engine),
        *grid_options(small_dataset, "1,8", "4"),
        "--throughput",
        "10",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "plan: 144 sequences in 32 batches over 2 cells under test" in out
    assert "build limits (unified config.json, TensorRT-LLM 0.13.0" in out and "every cell within" in out
    assert "estimate: about 14 s of generation at --throughput 10 sequences/s" in out
    assert "needs TensorRT-LLM" not in out
