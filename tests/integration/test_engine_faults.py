"""Engine faults at run time fail one cell, never the run (issue #7 item 2).

A hung ``generate`` under ``--batch-timeout``, outputs that are empty, missing, not text or
odd, and the wrong number of outputs: each ends as a scored output or as that cell's error
with its message; the other cells run and the report is written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.config import DatasetOptions, DesignOptions, RunConfig
from harness.model.report import CellResult
from harness.pipeline import RunOutcome
from tests.integration.common import Suites, grid_options, run_here
from tests.integration.fault_engines import RAISES, Hangs, OddOutputs, WrongCount
from tests.processes import run_harness, run_suites

HERE = Path(__file__).resolve().parent


def _config(tmp_path: Path, dataset: Path, *, batch_timeout: float) -> RunConfig:
    return RunConfig(
        data=DatasetOptions(dataset=str(dataset)),
        batch_sizes=(1, 2, 4),
        beam_widths=(1,),
        report_dir=tmp_path / "reports",
        goldens_dir=tmp_path / "goldens",
        cache_dir=tmp_path / "cache",
        batch_timeout=batch_timeout,
    )


def _hung_options(tmp_path: Path, dataset: Path, batch_timeout: str) -> list[str]:
    """A run of the engine whose call hangs (Hangs, in a process of its own) over 1,2 x 1."""
    return [
        "--engine",
        "fault_engines:Hangs",
        *grid_options(dataset, "1,2", "1"),
        "--batch-timeout",
        batch_timeout,
        "--report-dir",
        str(tmp_path / "r"),
    ]


def _cells(result: RunOutcome) -> dict[str, CellResult]:
    return {c.cell.id: c for c in result.report.cells}


def _error(cell: CellResult) -> str:
    """The cell's error (which it must have)."""
    assert cell.error is not None, cell.message
    return cell.error


def test_a_slow_batch_fails_its_cell_and_the_engine_recovers(tmp_path: Path, small_dataset: Path) -> None:
    """bs2's first call takes 1.5 s under --batch-timeout 1: bs2 is an error; bs4 waits for
    the late call to finish (never two calls at once) and then passes."""
    engine = Hangs(cell="2x1", seconds=1.5)
    t0 = time.perf_counter()
    result = run_here(_config(tmp_path, small_dataset, batch_timeout=1.0), engine=engine)
    cells = _cells(result)
    assert cells["bs2-beam1"].verdict == "error"
    assert (
        "BatchTimeout: generate did not return within --batch-timeout 1s (batch of 2 at beam "
        "width 1)" in _error(cells["bs2-beam1"])
    )
    assert cells["bs1-beam1"].verdict == "pass" and cells["bs4-beam1"].verdict == "pass"
    assert engine.finished_hung_call.is_set()  # bs4 started only after the late call ended
    assert time.perf_counter() - t0 < 30
    report = json.loads((result.folder / "report.json").read_text())
    assert {c["id"]: c["verdict"] for c in report["cells"]} == {
        "bs1-beam1": "pass",
        "bs2-beam1": "error",
        "bs4-beam1": "pass",
    }
    assert report["options"]["batch_timeout"] == 1.0


def test_a_hung_engine_costs_two_timeouts_and_the_report_is_written(
    tmp_path: Path, small_dataset: Path
) -> None:
    engine = Hangs(cell="2x1", seconds=60)
    try:
        t0 = time.perf_counter()
        result = run_here(_config(tmp_path, small_dataset, batch_timeout=0.5), engine=engine)
        assert time.perf_counter() - t0 < 20
    finally:
        engine.release.set()  # let the abandoned call end
    cells = _cells(result)
    assert cells["bs1-beam1"].verdict == "pass"
    assert "--batch-timeout 0.5s" in _error(cells["bs2-beam1"])
    assert (
        "not sent: the engine is still busy with the batch of 2 at beam width 1 that passed "
        "--batch-timeout 0.5s" in _error(cells["bs4-beam1"])
    )
    assert result.report.verdict == "fail" and (result.folder / "report.json").is_file()


@pytest.mark.slow  # a pytest process, left with a call that sleeps 600 s
def test_batch_timeout_through_pytest_and_the_process_exits(tmp_path: Path, small_dataset: Path) -> None:
    """The hung call sleeps 600 s; the pytest run still ends in seconds and fails that cell."""
    t0 = time.perf_counter()
    env = {"PYTHONPATH": str(HERE), "FAULT_HANG_CELL": "2x1"}
    proc = run_suites(*_hung_options(tmp_path, small_dataset, "1"), "-v", cwd=tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert time.perf_counter() - t0 < 120
    assert proc.returncode == 1, out
    assert "test_batch_positions[bs1-beam1] PASSED" in proc.stdout
    assert "test_batch_positions[bs2-beam1] FAILED" in proc.stdout
    assert "generate did not return within --batch-timeout 1s" in proc.stdout
    assert "Traceback" not in out


@pytest.mark.parametrize("kind", sorted(RAISES))
def test_a_raising_generate_fails_its_cell_through_both_entry_points(
    kind: str,
    tmp_path: Path,
    small_dataset: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    suites: Suites,
) -> None:
    """Out of memory, a CUDA error, a refusal, any exception: that cell is an error with the
    message, the other cells run and pass, the report is written; exit 1, no traceback."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("FAULT_RAISE", kind)
    monkeypatch.setenv("FAULT_RAISE_CELL", "4x2")
    message = str(RAISES[kind]())
    args = [
        "--engine",
        "fault_engines:Raises",
        *grid_options(small_dataset, "1,4", "1,2"),
        "--no-cache",
    ]

    capsys.readouterr()
    code = main(["run", *args, "--report-dir", str(tmp_path / "cli")])
    out = "".join(capsys.readouterr())
    assert code == 1, out
    assert message in out and "Traceback" not in out
    report = json.loads(next((tmp_path / "cli").glob("*/report.json")).read_text())
    verdicts = {c["id"]: c["verdict"] for c in report["cells"]}
    assert verdicts == {"bs1-beam1": "pass", "bs1-beam2": "pass", "bs4-beam1": "pass", "bs4-beam2": "error"}
    error = next(c["error"] for c in report["cells"] if c["id"] == "bs4-beam2")
    assert message in error and type(RAISES[kind]()).__name__ in error

    proc = suites("-q", "-rf", *args, "--report-dir", str(tmp_path / "suites"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "FAILED" in out and "test_batch_positions[bs4-beam2]" in out and message in out
    assert "test_batch_positions[bs4-beam1]" not in out.split("short test summary")[-1]
    assert "Traceback" not in out
    assert next((tmp_path / "suites").glob("*/report.json")).is_file()


def test_odd_outputs_are_scored_not_a_crash(tmp_path: Path, small_dataset: Path) -> None:
    config = RunConfig(
        data=DatasetOptions(dataset=str(small_dataset)),
        batch_sizes=(1, 8),
        beam_widths=(1,),
        report_dir=tmp_path / "reports",
        no_cache=True,
        design=DesignOptions(looks=1),  # every position of every prompt, which the assertions read
    )
    result = run_here(config, engine=OddOutputs())
    cells = _cells(result)
    assert all(c.error is None for c in result.report.cells), [c.error for c in result.report.cells]
    bs8 = cells["bs8-beam1"]
    # positions 0-2 hold "", None and text=None in every batch: all score 0
    assert [s.agreement for s in bs8.positions[:3]] == [0.0, 0.0, 0.0]
    assert bs8.positions[3].agreement > 0  # the plain string is scored as text
    assert cells["bs8-beam1"].verdict == "fail" and cells["bs1-beam1"].verdict == "pass"
    folder = result.folder
    assert folder is not None
    rows = [
        json.loads(line) for line in (folder / "generations.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    by_position = {(r["position"], r["id"]): r["output"] for r in rows if r["cell"] == "bs8-beam1"}
    doc = rows[0]["id"]
    assert by_position[(0, doc)] == by_position[(1, doc)] == by_position[(2, doc)] == ""
    assert by_position[(3, doc)].startswith("a plain string ")
    assert by_position[(4, doc)].startswith("bad bytes ?? ")  # lone surrogates replaced
    assert by_position[(6, doc)].count("word") == 20000
    assert json.loads((folder / "report.json").read_text(encoding="utf-8"))["verdict"] == "fail"


def test_wrong_number_of_outputs_fails_the_cell_with_a_message(tmp_path: Path, small_dataset: Path) -> None:
    config = RunConfig(
        data=DatasetOptions(dataset=str(small_dataset)),
        batch_sizes=(1, 2),
        beam_widths=(1, 2),
        report_dir=tmp_path / "reports",
        no_cache=True,
    )
    cells = _cells(run_here(config, engine=WrongCount()))
    assert (
        "the engine returned 1 outputs for a batch of 2; generate returns one Generation per "
        "prompt" in _error(cells["bs2-beam1"])
    )
    assert "the engine returned NoneType outputs for a batch of 2" in _error(cells["bs2-beam2"])
    assert cells["bs1-beam1"].verdict == "pass" and cells["bs1-beam2"].verdict == "pass"


@pytest.mark.parametrize(
    "ids, text",
    [
        ([2, 2, 2, 2], ""),  # all end/pad ids: nothing generated
        ([5, 10_000_000, -1, 6], None),  # ids outside the vocabulary are dropped, the rest decoded
    ],
)
def test_trtllm_outputs_of_padding_or_outside_the_vocabulary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ids: list[int], text: str | None
) -> None:
    from harness.config import EngineOptions
    from harness.engines.trtllm import TrtllmEngine, cut_generations
    from tests.doubles import trtllm_1_x as double

    double.install(monkeypatch)
    engine = TrtllmEngine(
        double.make_engine_dir(tmp_path / "e", with_tokenizer=True), options=EngineOptions()
    )
    end = engine.tokens.end_id
    row = [7, 8] + [end if t == 2 else t for t in ids]
    cut = cut_generations([[row]], [[len(row)]], [2], 1, end)
    generation = engine._generation(cut[0])
    expected = text if text is not None else engine.tokenizer.decode([5, 6], skip_special_tokens=True).strip()
    assert generation.text == expected


@pytest.mark.slow  # a `python -m harness run` process, the same
def test_hung_call_does_not_keep_the_cli_alive(tmp_path: Path, small_dataset: Path) -> None:
    """`python -m harness run` returns once the report is written, abandoned call or not."""
    t0 = time.perf_counter()
    options = _hung_options(tmp_path, small_dataset, "0.5")
    proc = run_harness("run", *options, cwd=tmp_path, env={"PYTHONPATH": str(HERE)}, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert (
        "bs2-beam1  ERROR  BatchTimeout: generate did not return within --batch-timeout 0.5s" in proc.stdout
    )
    assert time.perf_counter() - t0 < 60
