"""report.json (schema, integrity), report.html (self-contained, escaped), compare, JUnit."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.config import RunConfig
from harness.model.cell import Cell
from harness.pipeline import RunOutcome, run
from harness.report.compare import compare
from harness.report.serialize import load_report, verify
from tests.integration.common import run_options
from tests.integration.toy_engine import ToyEngine
from tests.unit.cell_results import clean_cell

SCHEMA = Path(__file__).resolve().parents[2] / "harness" / "report" / "report.schema.json"
MARKUP = "<script>alert(1)</script> <img src=x onerror=alert(2)> <b>bold</b> &amp;"


@pytest.fixture(scope="module")
def hostile_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Documents and summaries full of markup; the toy engine echoes it into its outputs."""
    path = tmp_path_factory.mktemp("data") / "hostile.jsonl"
    rows = [
        {
            "id": f"<i>d{i}</i>",
            "text": f"{MARKUP} story number {i} about the harbour and the council",
            "summary": f"{MARKUP} summary {i}",
        }
        for i in range(12)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(tmp: Path, dataset: Path, broken_from: int, name: str, **options: str) -> Path:
    values = run_options(tmp, dataset, "1,4,8", "1,2", report=name, goldens="g", cache=None)
    config = RunConfig.from_options({**values, **options})
    # run() adopts any object with generate(); harness annotates the parameter Engine (the full protocol)
    result = run(config, engine=ToyEngine(None, broken_from=broken_from))
    assert isinstance(result, RunOutcome)
    return result.folder


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory, hostile_dataset: Path) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("reports")
    return {
        "broken": _run(tmp, hostile_dataset, 2, "broken", signoff_by="QA <qa@example.com>"),
        "fixed": _run(tmp, hostile_dataset, -1, "fixed"),
    }


def test_report_json_validates_against_the_versioned_schema(reports: dict[str, Path]) -> None:
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    for folder in reports.values():
        report = json.loads((folder / "report.json").read_text())
        jsonschema.validate(report, schema)
        assert report["schema_version"] == 2 == schema["properties"]["schema_version"]["const"]
    bad = json.loads((reports["broken"] / "report.json").read_text())
    bad["cells"][0]["positions"][0]["agreement"] = 1.5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_signoff_and_integrity(reports: dict[str, Path]) -> None:
    report = json.loads((reports["broken"] / "report.json").read_text())
    assert report["signoff"]["by"] == "QA <qa@example.com>" and report["signoff"]["verdict"] == "fail"
    assert verify(report)
    report["cells"][0]["positions"][0]["agreement"] = 0.5  # someone edits a number
    assert not verify(report)
    assert report["integrity"]["sha256"] in (reports["broken"] / "report.md").read_text()


def test_html_is_self_contained_and_escapes_everything(reports: dict[str, Path]) -> None:
    html = (reports["broken"] / "report.html").read_text()
    assert "<script" not in html.lower()  # no live script at all, hostile or ours
    assert "<img" not in html.lower() and "<b>bold</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html)  # nothing fetched from the network
    assert html.count("<svg") == 2  # one heatmap per beam width
    assert "bs8-beam1" in html and "positions 2–7 degraded" in html
    assert "Examples at position" in html


def test_compare_lists_fixed_cells_and_exits_by_direction(
    reports: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.__main__ import main

    result = compare(load_report(reports["broken"]), load_report(reports["fixed"]))
    assert result.verdict == "better"
    assert any(line.startswith("bs8-beam1: fixed at positions 2, 3, 4, 5, 6, 7") for line in result.lines)
    assert main(["compare", str(reports["broken"]), str(reports["fixed"])]) == 0
    page = reports["fixed"].parent / "cmp.html"
    assert (
        main(["compare", str(reports["fixed"]), str(reports["broken"] / "report.json"), "--html", str(page)])
        == 1
    )
    out = capsys.readouterr().out
    assert "new degradation at positions 2, 3, 4, 5, 6, 7" in out and "verdict: worse" in out
    assert "<script" not in page.read_text().lower()


def test_compare_refuses_an_edited_report(reports: dict[str, Path], tmp_path: Path) -> None:
    """Issue 24: a report whose sha256 no longer matches is refused, not compared with a warning."""
    from harness.errors import ConfigError

    edited = json.loads((reports["fixed"] / "report.json").read_text())
    edited["verdict"] = "pass"
    edited["seconds"] = 0.0
    file = tmp_path / "report.json"
    file.write_text(json.dumps(edited))
    with pytest.raises(ConfigError, match=f"{file}: changed after it was written"):
        compare(load_report(reports["fixed"]), load_report(file))


@pytest.mark.skipif(not shutil.which("chromium"), reason="Chromium is not installed")
def test_report_renders_in_headless_chromium(reports: dict[str, Path], tmp_path: Path) -> None:
    from PIL import Image

    png = tmp_path / "report.png"
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={png}",
            "--window-size=1280,1600",
            (reports["broken"] / "report.html").as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    image = Image.open(png).convert("RGB")
    assert image.size == (1280, 1600)
    pixel = image.getpixel((20, 20))
    assert isinstance(pixel, tuple)
    r, g, b = pixel  # the verdict banner: red for a failing run
    assert r > 150 and g < 80 and b < 80


PHONE_PROBE = """<!doctype html><html><body style="margin:0">
<iframe id="f" width="390" height="844" style="border:0" srcdoc="{page}"></iframe>
<script>document.getElementById('f').addEventListener('load', () => {{
  const win = document.getElementById('f').contentWindow, doc = win.document;
  const heat = [...doc.querySelectorAll('.heat svg')].map(e => e.getBoundingClientRect());
  document.body.dataset.probe = JSON.stringify({{w: win.innerWidth,
    page: doc.documentElement.scrollWidth, heat: heat.map(r => [r.left, r.right])}});
}});</script></body></html>"""


@pytest.mark.skipif(not shutil.which("chromium"), reason="Chromium is not installed")
def test_report_fits_a_phone_width_window(reports: dict[str, Path], tmp_path: Path) -> None:
    """Issue 13: in a 390-pixel window (an iframe: headless Chromium's own window is at least
    500 wide) nothing but the wide tables, which scroll in their own box, is wider than the
    window, and every heatmap is drawn whole inside it."""
    page = tmp_path / "phone.html"
    page.write_text(PHONE_PROBE.format(page=html.escape((reports["broken"] / "report.html").read_text())))
    dom = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=600,900",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    found = re.search(r'data-probe="([^"]+)"', dom)
    assert found, dom[-2000:]
    probe = json.loads(html.unescape(found.group(1)))
    assert probe["w"] == 390
    assert probe["page"] <= 390  # no sideways scrolling of the page
    assert probe["heat"] and all(0 <= left and right <= 390 for left, right in probe["heat"])


def test_compare_refuses_runs_whose_positions_saw_different_prompts() -> None:
    from harness.errors import ConfigError
    from harness.model.report import Method
    from harness.model.vocab import Rotation
    from harness.report.compare import check_same_rotation

    full = Method(tolerance=0.02, alpha=0.01, rotation=Rotation.FULL, seed=0, sequences=1)
    sparse = Method(tolerance=0.02, alpha=0.01, rotation=Rotation.SPARSE, seed=0, sequences=1)
    other_seed = Method(tolerance=0.02, alpha=0.01, rotation=Rotation.SPARSE, seed=1, sequences=1)
    with pytest.raises(ConfigError, match="OLD used --rotation full .* NEW --rotation sparse"):
        check_same_rotation(full, sparse)
    with pytest.raises(ConfigError, match="same --rotation"):
        check_same_rotation(sparse, other_seed)


def test_report_json_is_the_model_serialized_and_reads_back_into_it(reports: dict[str, Path]) -> None:
    """One set of types: report.json is the model's Report as it is, and reading it back gives
    the same types (vocabularies as enums), which serialize to the very same document."""
    from harness.model.analysis import PositionStats
    from harness.model.report import CellResult
    from harness.model.vocab import CheckStatus, Layout, Rotation, Verdict
    from harness.report.serialize import to_json

    for folder in reports.values():
        written = json.loads((folder / "report.json").read_text())
        loaded = load_report(folder)
        assert loaded.intact and to_json(loaded.report) == written
        report = loaded.report
        assert isinstance(report.verdict, Verdict) and isinstance(report.method.rotation, Rotation)
        assert report.method.rotation == Rotation.FULL
        cell = report.cells[0]
        assert isinstance(cell, CellResult) and isinstance(cell.verdict, Verdict)
        assert all(isinstance(p, PositionStats) for c in report.cells for p in c.positions)
        assert all(isinstance(ch.status, CheckStatus) for c in report.cells for ch in c.limit_checks)
        assert report.limits is None or isinstance(report.limits.layout, Layout)
        # derived figures agree with the positions they come from
        for c in report.cells:
            assert c.degraded_positions == tuple(p.position for p in c.positions if p.degraded)


def test_the_schema_describes_every_field_of_the_model_and_no_other() -> None:
    """report.schema.json and the model's types cannot drift apart: each object the schema
    describes names exactly the fields of its type."""
    from dataclasses import fields

    from harness.model.analysis import PositionStats
    from harness.model.report import CellResult, Method, Report, ShardScores

    schema = json.loads(SCHEMA.read_text())
    cell = schema["properties"]["cells"]["items"]
    described = {
        Report: schema,
        CellResult: cell,
        PositionStats: cell["properties"]["positions"]["items"],
        Method: schema["properties"]["method"],
        ShardScores: schema["properties"]["scores"],
    }
    for cls, part in described.items():
        assert set(part["properties"]) == {f.name for f in fields(cls)}, cls.__name__


@pytest.mark.parametrize("positions", [1, 2, 8, 16])
def test_the_heatmap_title_fits_its_figure(positions: int) -> None:
    """A narrow grid (few positions) used to clip the two-line title at both ends."""
    import matplotlib.pyplot as plt

    from harness.report.plots import heatmap_figure

    cell = clean_cell(Cell(positions, 1))
    fig = heatmap_figure(1, [cell], 0.02)
    fig.canvas.draw()
    title = fig.axes[0].title.get_window_extent()
    plt.close(fig)
    assert 0 <= title.x0 and title.x1 <= fig.bbox.width


def test_the_audit_holds_the_engine_wide_test_to_its_figures(reports: dict[str, Path]) -> None:
    """The engine-wide test is read back, corrected in the run's family and decides the run
    verdict: a flag edited, or the test left out, is listed."""
    from dataclasses import replace

    from harness.model.analysis import EngineWide
    from harness.model.vocab import Verdict
    from harness.report.audit import audit

    report = load_report(reports["fixed"]).report
    e = report.engine_wide
    assert isinstance(e, EngineWide) and not e.failed and report.verdict == Verdict.PASS
    assert e.cells == ("bs4-beam1", "bs8-beam1", "bs4-beam2", "bs8-beam2") and audit(report) == []
    flagged = replace(
        report, engine_wide=replace(e, test=replace(e.test, flagged=True)), verdict=Verdict.FAIL
    )
    assert any(line.startswith("engine-wide test: flagged true") for line in audit(flagged))
    assert any(line.startswith("engine_wide: missing") for line in audit(replace(report, engine_wide=None)))
    assert report.method.engine_share == 0.1
    from harness.report.summary import cell_lines

    assert cell_lines(report)[-1].strip().startswith("engine-wide  PASS  mean drop")  # the terminal's row
    reweighted = replace(report, method=replace(report.method, engine_share=0.5))
    assert any(line.startswith("method.engine_share 0.5") for line in audit(reweighted))
    older = replace(report, engine_wide=None, method=replace(report.method, engine_share=None))
    assert not any(line.startswith("engine_wide") for line in audit(older))  # written before the test
    narrowed = replace(report, engine_wide=replace(e, cells=e.cells[:2]))
    assert any(line.startswith("engine_wide: pools bs4-beam1, bs8-beam1,") for line in audit(narrowed))


def test_the_quality_question_is_blind_only_under_the_smallest_drop_the_run_detects() -> None:
    """A damaged output can lose 0.15 here. The run detects 0.03 at one cell and 0.40 at a
    thin one (a sweep's largest batch, a cell whose damage inflates its own spread): it sees
    damage, and is blind only where even its best cell's figure is beyond half the room. It
    was judged by its worst cell, so nearly every sweep and fault-finding run said 'nearly blind'."""
    from dataclasses import replace

    from harness.model.cell import Cell
    from harness.model.scores import Levels
    from harness.report.build import blindness
    from tests.unit.cell_results import clean_cell

    level = {1: Levels(agreement=(1.0,) * 4, quality=(0.5,) * 4, unrelated=(0.35,) * 4)}
    sharp, thin = (replace(clean_cell(Cell(b, 1)), detectable_drop=d) for b, d in ((2, 0.03), (8, 0.40)))
    assert blindness(level, [sharp, thin], tolerance=0.02) is None
    said = blindness(level, [replace(sharp, detectable_drop=0.09), thin], tolerance=0.02)
    assert said is not None and "under twice the smallest drop this run detects (0.090)" in said


def test_compare_names_every_scheduled_cell_whose_verdict_changed(reports: dict[str, Path]) -> None:
    from dataclasses import replace

    from harness.model.schedule import ScheduledCell
    from harness.model.vocab import Schedule, Verdict
    from harness.report.compare import _schedules_changed

    base = load_report(reports["fixed"]).report
    refill = ScheduledCell(Schedule.REFILL, 1, 8, Verdict.PASS, "64 requests against batch size 1: ...")
    warm = ScheduledCell(Schedule.WARM, 1, 8, Verdict.PASS, "64 requests against their cold run: ...")
    old = replace(base, schedules=(refill, warm))
    broken = replace(refill, verdict=Verdict.FAIL, message="degraded; worst: requests that took a freed slot")
    lines: list[str] = []
    assert _schedules_changed(old, replace(base, schedules=(broken, warm)), lines)
    assert lines == ["refill-c8-beam1: pass -> fail: degraded; worst: requests that took a freed slot"]
    gone: list[str] = []
    assert _schedules_changed(old, replace(base, schedules=(refill,)), gone)  # NEW no longer runs warm
    assert gone == ["warm-c8-beam1: pass -> not run"]
    assert not _schedules_changed(replace(base, schedules=(broken,)), replace(base, schedules=(refill,)), [])
