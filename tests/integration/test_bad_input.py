"""Bad input stops `pytest suites/` with one message naming the option or file, no traceback.

The cases run in this process (pytester); one runs through a real `pytest` subprocess too,
as a user starts it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.common import Suites, grid_options
from tests.processes import run_suites

HERE = Path(__file__).resolve().parent
TOY = {"PYTHONPATH": str(HERE)}  # the test engines (run_suites puts this checkout first)


def _bad_engine(tmp_path: Path, content: str | None) -> Path:
    d = tmp_path / "engine"
    d.mkdir()
    if content is not None:
        (d / "config.json").write_text(content)
    return d


@pytest.mark.parametrize(
    "make_args, words",
    [
        (lambda t: ["--batch-sizes", "0"], "--batch-sizes '0': 0 must be at least 1"),
        (lambda t: ["--beam-widths", "2,x"], "'x' is not an integer"),
        (lambda t: ["--beam-widths", "2,2"], "given twice"),
        (lambda t: ["--max-new-tokens", "-1"], "--max-new-tokens"),
        (lambda t: ["--engine", str(t / "nope")], "no such engine directory"),
        (lambda t: ["--engine", str(_bad_engine(t, None))], "config.json: missing"),
        (lambda t: ["--engine", str(_bad_engine(t, "{oops"))], "invalid JSON at line 1"),
        (lambda t: ["--backend", "emulater", "--engine", str(t)], "did you mean 'emulator'"),
        (lambda t: ["--engine", "toy_engine:ToyEngine", "--dataset", str(t / "none.jsonl")], "no such file"),
        (
            lambda t: ["--engine", "toy_engine:ToyEngine", "--batch-sizes", "128"],
            "needs at least 128 prompts",
        ),
        (lambda t: ["--engine", "toy_engine:ToyEngine", "--prompt-template", "Summarize"], "{text}"),
    ],
)
def test_usage_errors(
    tmp_path: Path, suites: Suites, make_args: Callable[[Path], list[str]], words: str
) -> None:
    proc = suites(*make_args(tmp_path), "--report-dir", str(tmp_path / "r"), path=[HERE])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out
    assert words in out
    assert "Traceback" not in out


def test_a_usage_error_in_a_real_process(tmp_path: Path) -> None:
    """The same through `python -m pytest suites/` in a subprocess: exit status 4, one line."""
    proc = run_suites(
        "--engine",
        "toy_engine:ToyEngine",
        "--prompt-template",
        "Summarize",
        "--report-dir",
        str(tmp_path / "r"),
        cwd=tmp_path,
        env=TOY,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out
    assert "{text}" in out and "Traceback" not in out


def test_missing_dataset_field(tmp_path: Path, suites: Suites) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"article": "a b c", "summary": "x"}) + "\n")
    proc = suites(
        "--engine",
        "toy_engine:ToyEngine",
        "--dataset",
        str(data),
        "--batch-sizes",
        "1",
        "--report-dir",
        str(tmp_path / "r"),
        path=[HERE],
    )
    assert proc.returncode == 4
    assert "no field 'text'" in proc.stdout + proc.stderr and "--text-field" in proc.stdout + proc.stderr


def test_engine_fault_fails_only_its_cell(tmp_path: Path, small_dataset: Path, suites: Suites) -> None:
    """A generate() that raises for one cell: that cell errors, the others pass, report written."""
    mod = tmp_path / "faulty_engine.py"
    mod.write_text(
        "from harness.engines.base import Generation\n"
        "class Faulty:\n"
        "    def __init__(self, path): pass\n"
        "    def generate(self, prompts, settings):\n"
        "        if settings.beam_width == 2 and len(prompts) == 4:\n"
        "            raise RuntimeError('Num beams (2) exceeds the engine or specified limit (1)')\n"
        "        return [Generation(text=p.split()[0]) for p in prompts]\n"
    )
    proc = suites(
        "--engine",
        "faulty_engine:Faulty",
        *grid_options(small_dataset, "1,4", "1,2"),
        "--report-dir",
        str(tmp_path / "r"),
        "-v",
        path=[tmp_path],
    )
    assert proc.returncode == 1
    assert "test_batch_positions[bs4-beam2] FAILED" in proc.stdout
    assert "test_batch_positions[bs4-beam1] PASSED" in proc.stdout
    assert "Num beams (2) exceeds the engine or specified limit (1)" in proc.stdout
    report = json.loads(next((tmp_path / "r").glob("*/report.json")).read_text())
    assert {c["id"]: c["verdict"] for c in report["cells"]}["bs4-beam2"] == "error"
