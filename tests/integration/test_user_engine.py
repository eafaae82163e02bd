"""pytest suites/ with a user's engine class: the plugin, plan, scoring and report, fast."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SuitesRun, only_report
from tests.integration.common import Suites, grid_options, run_here

HERE = Path(__file__).resolve().parent


def _env(broken_from: int) -> dict[str, str]:
    return {"TOY_BROKEN_FROM": str(broken_from)}


def _toy(
    suites: Suites, dataset: Path, sizes: str, widths: str, report_dir: Path, broken_from: int, *more: str
) -> SuitesRun:
    """`pytest suites/` on the toy engine, broken from position ``broken_from`` (-1: healthy)."""
    return suites(
        "--engine",
        "toy_engine:ToyEngine",
        *grid_options(dataset, sizes, widths),
        "--report-dir",
        str(report_dir),
        "--looks",
        "1",  # the fixed design: its sequence counts are asserted
        *more,
        env=_env(broken_from),
        path=[HERE],
    )


def test_healthy_user_engine_passes(tmp_path: Path, small_dataset: Path, suites: Suites) -> None:
    proc = _toy(suites, small_dataset, "1,4", "1,2", tmp_path, -1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "test_batch_positions[bs4-beam2] PASSED" in proc.stdout or "passed" in proc.stdout
    # output that is not a terminal (a CI log) gets progress lines, not a bar
    assert "progress: all 160 sequences generated in " in proc.stdout
    report = only_report(tmp_path)
    assert report["verdict"] == "pass"
    assert [c["id"] for c in report["cells"]] == ["bs1-beam1", "bs4-beam1", "bs1-beam2", "bs4-beam2"]
    assert all(c["degraded_positions"] == [] for c in report["cells"])
    assert (tmp_path / Path(next(tmp_path.glob("*/report.md")))).exists()


def test_broken_positions_fail_with_ranges(tmp_path: Path, small_dataset: Path, suites: Suites) -> None:
    proc = _toy(suites, small_dataset, "1,8", "1", tmp_path, 5, "-v")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "test_batch_positions[bs8-beam1] FAILED" in proc.stdout
    assert "bs8-beam1: positions 5–7 degraded (quality vs references" in proc.stdout
    assert "at batch size 1; agreement with the baseline" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    # no build limits for a user class: the limits tests are skipped, not passed silently
    assert "test_engine_limits[bs8-beam1] SKIPPED" in proc.stdout
    report = only_report(tmp_path)
    cell = {c["id"]: c for c in report["cells"]}["bs8-beam1"]
    assert cell["degraded_positions"] == [5, 6, 7] and cell["verdict"] == "fail"
    assert [p["position"] for p in cell["positions"]] == list(range(8))
    assert cell["positions"][0]["agreement"] == 1.0 and cell["positions"][6]["agreement"] < 0.2
    assert report["dataset"]["hash"] and report["verdict"] == "fail"
    assert "report:" in proc.stdout and str(tmp_path) in proc.stdout


def test_cell_results_are_junit_properties(tmp_path: Path, small_dataset: Path, suites: Suites) -> None:
    import xml.etree.ElementTree as ET

    xml = tmp_path / "junit.xml"
    proc = _toy(suites, small_dataset, "1,4", "1", tmp_path / "r", 2, f"--junitxml={xml}")
    assert proc.returncode == 1
    cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_batch_positions[bs4-beam1]"].iter("property")}
    assert props["cell"] == "bs4-beam1" and props["verdict"] == "fail"
    assert props["degraded_positions"] == "2,3" and props["agreement_position_0"] == "1.0000"
    assert "report.html" in proc.stdout


def test_backend_class_with_a_plain_directory(tmp_path: Path, small_dataset: Path, suites: Suites) -> None:
    """--backend module:Class --engine DIR, DIR without config.json (the README's form)."""
    folder = tmp_path / "weights"
    folder.mkdir()
    proc = suites(
        "--backend",
        "toy_engine:ToyEngine",
        "--engine",
        str(folder),
        *grid_options(small_dataset, "1,2", "1"),
        "--report-dir",
        str(tmp_path / "r"),
        env=_env(-1),
        path=[HERE],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert only_report(tmp_path / "r")["engine"]["path"] == str(folder)


def test_bad_golden_engine_stops_before_generating(
    tmp_path: Path, small_dataset: Path, suites: Suites
) -> None:
    proc = suites(
        "--engine",
        "toy_engine:ToyEngine",
        "--dataset",
        str(small_dataset),
        "--update-goldens",
        "--golden-engine",
        str(tmp_path / "missing"),
        "--report-dir",
        str(tmp_path / "r"),
        env=_env(-1),
        path=[HERE],
    )
    assert proc.returncode == 4
    assert "no such engine directory" in proc.stdout + proc.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_a_dataset_the_engine_cannot_summarize_is_said_to_leave_quality_nearly_blind(
    tmp_path: Path, small_dataset: Path
) -> None:
    """Outputs that score about as well against other documents' references as against their
    own: the quality question can hardly see damage, and the run says so (it passed silently
    at 0.08 everywhere); with references that fit, it does not."""
    import json

    from harness.config import DatasetOptions, RunConfig
    from harness.model.vocab import Question
    from harness.pipeline import RunOutcome
    from harness.report.summary import header_lines
    from tests.integration.toy_engine import ToyEngine

    rows = [json.loads(line) for line in small_dataset.read_text().splitlines()]
    unfit = tmp_path / "unfit.jsonl"  # references from a world the engine never writes about
    unfit.write_text(
        "".join(
            json.dumps({**r, "summary": f"quarterly zinc tariffs in region {i} rose as cobalt futures fell"})
            + "\n"
            for i, r in enumerate(rows)
        )
    )
    results: dict[str, RunOutcome] = {}
    for name, data in (("fit", small_dataset), ("unfit", unfit)):
        config = RunConfig(
            data=DatasetOptions(dataset=str(data)),
            batch_sizes=(1, 4),
            beam_widths=(1,),
            no_cache=True,
            report_dir=tmp_path / name,
        )
        results[name] = run_here(config, engine=ToyEngine(None))
    fit, unfit_run = (results[k].report for k in ("fit", "unfit"))
    assert fit is not None and unfit_run is not None
    assert fit.method.questions[Question.QUALITY] == "gate"
    said = unfit_run.method.questions[Question.QUALITY]
    assert said.startswith("gate, but nearly blind here: at beam width 1 batch size 1 scores ")
    assert any(
        line.startswith("warning: the batch-size quality question is nearly blind here")
        for line in header_lines(unfit_run)
    )
    assert all(c.detectable_drop is not None for c in unfit_run.cells if c.batch_size > 1)
