"""Issue 24, class 6: pytest's own ways of splitting or narrowing a session meet a run that
generates once for the whole grid.

- pytest-xdist (``-n 2``): every worker ran the whole grid, then INTERNALERROR (DumpError: an
  enum in ``user_properties``). Now the workers refuse and the session ends with one line, a
  usage error (exit 4), before anything is generated.
- ``user_properties`` (JUnit properties) hold plain str/int/float/bool values only.
- ``-k``/``--lf``/``--deselect``: the session says which cells' tests it runs, and that the
  generation and the report still cover the whole grid.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.model.vocab import CheckStatus, Verdict
from tests.conftest import only_report
from tests.integration.common import Suites, grid_options
from tests.processes import run_suites

HERE = Path(__file__).resolve().parent
ECHO = ("--engine", "fault_engines:Echo")  # a healthy engine with no model: nothing to load


def _grid(tmp_path: Path, dataset: Path) -> list[str]:
    return [
        *ECHO,
        *grid_options(dataset, "1,2,4", "1"),
        "--report-dir",
        str(tmp_path / "reports"),
        "--no-cache",
    ]


@pytest.mark.slow  # three processes (the session and two workers)
def test_xdist_is_refused_in_one_line_before_anything_is_generated(
    tmp_path: Path, small_dataset: Path
) -> None:
    proc = run_suites("-n", "2", *_grid(tmp_path, small_dataset), cwd=tmp_path, env={"PYTHONPATH": str(HERE)})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 4, text
    assert "INTERNALERROR" not in text and "Traceback" not in text and "DumpError" not in text
    lines = [line for line in text.splitlines() if "drop -n" in line]
    assert lines == [
        "ERROR: pytest suites/ runs one generation for the whole grid and writes one "
        "report, so pytest-xdist would run all of it in every worker; drop -n "
        "(pytest-xdist): to spread a run over GPUs, give each job one --shard K/N "
        "and merge their reports (docs/ci.md)"
    ], text
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


def test_user_properties_hold_plain_values_only(tmp_path: Path, small_dataset: Path, suites: Suites) -> None:
    """What every harness test records for --junitxml, as a pytest plugin of the session sees
    it: exactly str, int, float or bool (an enum, a Path are not: xdist cannot send them)."""
    probe = tmp_path / "props_probe.py"
    out = tmp_path / "props.jsonl"
    probe.write_text(
        "import json\n"
        "def pytest_runtest_logreport(report):\n"
        "    if report.when == 'teardown':\n"
        f"        with open({str(out)!r}, 'a') as f:\n"
        "            for name, value in report.user_properties:\n"
        "                f.write(json.dumps([name, type(value).__name__]) + '\\n')\n"
    )
    proc = suites("-q", "-p", "props_probe", *_grid(tmp_path, small_dataset), path=[HERE, tmp_path])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recorded = [json.loads(line) for line in out.read_text().splitlines()]
    names = {name for name, _ in recorded}
    assert {"cell", "verdict", "report", "quality_position_1"} <= names
    assert any(name.startswith("limit_") for name in names)
    assert {kind for _, kind in recorded} <= {"str", "int", "float", "bool"}, recorded


def test_plain_turns_enums_and_objects_into_plain_values() -> None:
    from harness.plugin import plain

    assert plain(Verdict.PASS) == "pass" and type(plain(Verdict.PASS)) is str
    assert type(plain(CheckStatus.WARN)) is str
    assert plain(Path("/r")) == "/r"
    assert plain(True) is True and type(plain(3)) is int and type(plain(0.5)) is float


def test_a_selection_says_what_it_tests_and_what_is_still_generated(
    tmp_path: Path, small_dataset: Path, suites: Suites
) -> None:
    proc = suites("-k", "bs2", *_grid(tmp_path, small_dataset), path=[HERE])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("selection (")]
    assert lines == [
        "selection (-k, -m, --lf, --deselect or test ids): test_batch_positions and "
        "test_engine_limits run for 1 of the 3 cells (bs2-beam1); the engine still "
        "generates all 3 cells and the report covers them all; only the selected "
        "tests pass or fail in this session (to generate fewer cells: "
        "--batch-sizes, --beam-widths)"
    ], proc.stdout
    report = only_report(tmp_path / "reports")  # as the line says: every cell of the grid
    assert sorted(c["id"] for c in report["cells"]) == ["bs1-beam1", "bs2-beam1", "bs4-beam1"]

    whole = suites(*_grid(tmp_path / "whole", small_dataset), path=[HERE])
    assert whole.returncode == 0 and "selection (" not in whole.stdout


def test_a_selection_without_positions_tests_says_nothing_is_generated(
    tmp_path: Path, small_dataset: Path, suites: Suites
) -> None:
    proc = suites("-q", "-k", "limits and bs4", *_grid(tmp_path, small_dataset), path=[HERE])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "selection (-k, -m, --lf, --deselect or test ids): test_engine_limits runs for 1 of "
        "the 3 cells (bs4-beam1); no selected test needs outputs, so nothing is generated"
        in proc.stdout.splitlines()
    ), proc.stdout
    assert not (tmp_path / "reports").exists() or not list((tmp_path / "reports").rglob("*.json"))
