"""--update-goldens records after a complete run; later runs use the goldens; goldens for other
content stop the run with the command that fixes it and stay untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import only_report
from tests.integration.common import EngineFactory, Suites, grid_options

HERE = Path(__file__).resolve().parent
TOY = {"TOY_BROKEN_FROM": "-1"}


def _copy(src: Path, dst: Path) -> Path:
    dst.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    return dst


def test_record_use_and_refuse_mismatched_goldens(
    tmp_path: Path, small_dataset: Path, suites: Suites
) -> None:
    data = _copy(small_dataset, tmp_path / "news.jsonl")
    goldens = tmp_path / "g"
    common = [
        "--engine",
        "toy_engine:ToyEngine",
        *grid_options(data, "1,2", "1,2"),
        "--goldens-dir",
        str(goldens),
    ]

    rec = suites(*common, "--update-goldens", "--report-dir", str(tmp_path / "r1"), env=TOY, path=[HERE])
    assert rec.returncode == 0, rec.stdout
    files = sorted(p.name for p in goldens.rglob("*.json"))
    assert files == ["news-beam1.json", "news-beam2.json"]
    assert "goldens written:" in rec.stdout
    golden_file = next(goldens.rglob("news-beam2.json"))
    recorded = json.loads(golden_file.read_text())
    assert recorded["dataset"]["count"] == 16 and recorded["settings"]["beam_width"] == 2
    assert recorded["source"]["batch_size"] == 1

    use = suites(*common, "--report-dir", str(tmp_path / "r2"), env=TOY, path=[HERE])
    assert use.returncode == 0, use.stdout
    assert only_report(tmp_path / "r2")["baseline"]["2"].startswith("goldens ")

    before = golden_file.read_bytes()
    lines = data.read_text().splitlines()
    lines[0] = lines[0].replace("won", "lost", 1) if "won" in lines[0] else lines[0].replace(" ", "  ", 1)
    data.write_text("\n".join(lines) + "\n")
    bad = suites(*common, "--report-dir", str(tmp_path / "r3"), env=TOY, path=[HERE])
    assert bad.returncode == 4
    err = bad.stdout + bad.stderr
    assert "dataset hash" in err and "--update-goldens" in err and str(goldens) in err
    assert "Traceback" not in err
    assert golden_file.read_bytes() == before


@pytest.mark.slow  # hf and emulator generations
def test_goldens_from_another_engine(
    tmp_path: Path,
    engine_factory: EngineFactory,
    small_dataset: Path,
    suites: Suites,
) -> None:
    from harness.engines.emulator.build import BUNDLED_MODEL

    goldens = tmp_path / "g"
    proc = suites(
        "--engine",
        str(engine_factory(8, 1)),
        *grid_options(small_dataset, "1,2", "1"),
        "--max-new-tokens",
        "24",
        "--update-goldens",
        "--golden-engine",
        str(BUNDLED_MODEL),
        "--goldens-dir",
        str(goldens),
        "--report-dir",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    [file] = list(goldens.rglob("*.json"))
    recorded = json.loads(file.read_text())
    assert recorded["source"]["backend"] == "hf"
    # hf and the emulator agree on these weights, so batch size 1 matches the goldens
    assert only_report(tmp_path)["cells"][0]["baseline_level"] == 1.0
