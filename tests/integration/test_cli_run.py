"""``python -m harness run`` says what pytest says: the plan, the header (engine, dataset,
baselines), the cells, the findings, the cache and the verdict; progress lines in a log."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.__main__ as cli
from tests.integration.common import grid_options

HERE = Path(__file__).resolve().parent


def test_a_run_prints_the_header_the_findings_and_progress(
    tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("TOY_BROKEN_FROM", "2")
    monkeypatch.delitem(__import__("sys").modules, "toy_engine", raising=False)
    code = cli.main(
        [
            "run",
            "--engine",
            "toy_engine:ToyEngine",
            *grid_options(small_dataset, "1,4", "1"),
            "--report-dir",
            str(tmp_path),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("plan: 80 sequences in 32 batches over 2 cells under test")
    assert any(
        line.startswith("engine toy_engine:ToyEngine (toy_engine:ToyEngine); dataset ") for line in lines
    )
    assert "baseline beam 1: batch size 1 of this run" in lines
    # a module:Class engine that does not say: the header names it (off is not printed)
    assert any(
        line.startswith("KV-cache reuse across requests: unknown (the engine does not say") for line in lines
    )
    assert "bs4-beam1: positions 2–3 degraded" in out
    assert any(line.startswith("generation cache off") for line in lines)
    assert lines[-1].startswith("verdict: fail   report: ")
    # stderr is not a terminal here: a progress line per look of the sequential design, which
    # says what it spent of the fixed design's 80 sequences
    assert err.count("progress: all ") >= 1 and " sequences generated in " in err
    assert "sequential design (4 looks): " in out and "of the fixed design's 80 sequences" in out
