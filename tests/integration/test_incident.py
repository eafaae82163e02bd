"""The incident end to end: `pytest suites/` on emulator engines built with build-engine.

Runs on the first 16 bundled prompts with 32 new tokens to stay quick; the full bundled set
is the main job in .ci/run. The default grid runs as a user runs it, in a subprocess (once
for the module); the single-cell runs in this process.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.__main__ import main
from tests.conftest import only_report
from tests.integration.common import EngineFactory, Suites, cli_options, grid_options
from tests.processes import SUITES, run_suites

FAST = ("--max-new-tokens", "32")


@pytest.fixture(scope="module")
def incident_grid(
    tmp_path_factory: pytest.TempPathFactory, engine_factory: EngineFactory, small_dataset: Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The broken engine (8 x 1 beam slots) over the default grid."""
    out = tmp_path_factory.mktemp("grid")
    proc = run_suites(*cli_options(engine_factory(8, 1), small_dataset, out), "-v", *FAST, cwd=out)
    return proc, only_report(out)


@pytest.mark.slow  # the default grid: 12 cells on the emulator
def test_incident_cell_fails_with_cause_and_positions(
    incident_grid: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    proc, report = incident_grid
    assert proc.returncode == 1
    cells = {c["id"]: c for c in report["cells"]}
    assert cells["bs8-beam4"]["degraded_positions"] == [2, 3, 4, 5, 6, 7]
    assert "test_engine_limits[bs8-beam4] FAILED" in proc.stdout
    assert "test_batch_positions[bs8-beam4] FAILED" in proc.stdout
    assert "num_beams 4 exceeds the engine's max_beam_width 1" in proc.stdout
    assert "--max_beam_width 4" in proc.stdout
    assert "bs8-beam4: positions 2–7 degraded (quality vs references" in proc.stdout
    # the default grid fails at beam widths 4 and 2: the finding names both (issue #8's example)
    assert (
        "likely cause (overflow): positions >= 2 degraded at beam width 4 and positions >= 4 "
        "degraded at beam width 2: matches KV beam-slot overflow for max_batch_size 8 x "
        "max_beam_width 1 = 8 slots; rebuild with --max_beam_width 4"
    ) in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_default_grid_localizes_every_damaged_cell_and_nothing_else(
    incident_grid: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    _, report = incident_grid
    degraded = {c["id"]: c["degraded_positions"] for c in report["cells"]}
    expected: dict[str, list[int]] = {cid: [] for cid in degraded}
    expected.update({"bs8-beam2": [4, 5, 6, 7], "bs4-beam4": [2, 3], "bs8-beam4": [2, 3, 4, 5, 6, 7]})
    assert degraded == expected
    assert len(degraded) == 12  # 1,2,4,8 x 1,2,4
    limits_failed = {c["id"] for c in report["cells"] if c["limits_verdict"] == "fail"}
    assert limits_failed == {f"bs{b}-beam{w}" for b in (1, 2, 4, 8) for w in (2, 4)}
    assert report["limits"]["max_beam_width"] == 1 and report["verdict"] == "fail"
    # where batch sizes start failing, per beam width (the slot overflow's threshold)
    assert [(b["beam_width"], b["last_passing"], b["first_failing"]) for b in report["boundaries"]] == [
        (1, 8, None),
        (2, 4, 8),
        (4, 2, 4),
    ]
    assert [b["message"] for b in report["boundaries"]][1:] == [
        "beam 2: batch sizes 1, 2, 4 pass; fails from 8 (positions 4–7)",
        "beam 4: batch sizes 1, 2 pass; fails from 4 (positions 2–7)",
    ]
    for c in report["cells"]:
        assert len(c["positions"]) == c["batch_size"]
        for p in c["positions"]:
            assert 0.0 <= p["agreement"] <= 1.0 and 0.0 <= p["quality"] <= 1.0


@pytest.mark.slow  # bs8-beam4 on the emulator
def test_rebuilt_engine_passes(
    tmp_path: Path,
    engine_factory: EngineFactory,
    small_dataset: Path,
    suites: Suites,
) -> None:
    grid = ("--num-prompts", "8", "--batch-sizes", "8", "--beam-widths", "4")
    proc = suites(*cli_options(engine_factory(8, 4), small_dataset, tmp_path), *grid, *FAST)
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = only_report(tmp_path)
    assert report["verdict"] == "pass"
    [cell] = report["cells"]
    assert cell["id"] == "bs8-beam4" and cell["degraded_positions"] == []
    assert [p["agreement"] for p in cell["positions"]] == [1.0] * 8
    # the limits and the KV-cache budget travel with the report
    assert report["limits"]["layout"] == "emulator" and report["limits"]["max_beam_width"] == 4
    [requested, maxima] = report["memory"]
    # K and V x 4 layers x 2 KV heads x head 32 x 512 positions x 8 x 4 slots x 4 bytes (float32)
    assert (
        requested["label"] == "bs8-beam4" and requested["kv_cache_bytes"] == 2 * 4 * 2 * 32 * 512 * 8 * 4 * 4
    )
    assert maxima["label"].startswith("engine maxima 8 x 4")
    md = next(tmp_path.glob("*/report.md")).read_text()
    assert "Memory per GPU: bs8-beam4: KV cache" in md
    # every prefill computed in its own batch, and the report says so
    assert report["engine"]["kv_cache_reuse"]["setting"] == "off"
    assert "- KV-cache reuse across requests: off (the emulator writes every batch's prompts" in md


@pytest.mark.slow
def test_cli_run_has_the_same_verdict(
    tmp_path: Path,
    engine_factory: EngineFactory,
    small_dataset: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [
        "--engine",
        str(engine_factory(8, 1)),
        *grid_options(small_dataset, "8", "4"),
        "--report-dir",
        str(tmp_path),
        *FAST,
    ]
    code = main(["run", *args])
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "bs8-beam4: positions 2–7 degraded" in out
    assert only_report(tmp_path)["cells"][0]["degraded_positions"] == [2, 3, 4, 5, 6, 7]


def test_limits_alone_need_no_generation(
    tmp_path: Path, engine_factory: EngineFactory, suites: Suites
) -> None:
    """Selecting only the limits tests reads config.json and the tokenizer, generates nothing."""
    proc = suites(
        "--engine",
        str(engine_factory(8, 1)),
        "--beam-widths",
        "4",
        "--report-dir",
        str(tmp_path / "r"),
        suite=SUITES / "test_preflight.py",
    )
    assert proc.returncode == 1
    assert "preflight: build limits exceeded in 4 cells" in proc.stdout
    assert "4 failed" in proc.stdout
    assert not list((tmp_path / "r").glob("*/report.json"))  # the engine never ran
