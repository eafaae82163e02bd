"""suites/test_throughput.py: skipped unless asked for; with --benchmark-enable or
--benchmark-only it times each cell and records rates, cell, engine fingerprint and the
accelerator in pytest-benchmark's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.common import Suites
from tests.processes import SUITES

TINY = ("--batch-sizes", "1,2", "--beam-widths", "1", "--max-new-tokens", "8")


def test_skipped_unless_asked_for(tmp_path: Path, suites: Suites) -> None:
    proc = suites(*TINY, "--report-dir", str(tmp_path / "r"), "-rs", suite=SUITES / "test_throughput.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 skipped" in proc.stdout and "add --benchmark-enable (or --benchmark-only)" in proc.stdout
    assert "Name (time in" not in proc.stdout  # no pytest-benchmark table
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


@pytest.mark.slow  # the bundled engine: a run and its benchmark
def test_whole_suite_with_benchmarks_runs_both(tmp_path: Path, small_dataset: Path, suites: Suites) -> None:
    out = tmp_path / "bench.json"
    proc = suites(
        *TINY,
        "--dataset",
        str(small_dataset),
        "--report-dir",
        str(tmp_path / "r"),
        "--benchmark-enable",
        f"--benchmark-json={out}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "10 passed" in proc.stdout  # limits, positions and throughput for 2 cells; 4 schedules
    assert list((tmp_path / "r").glob("*/report.json"))
    data = json.loads(out.read_text())
    assert data["machine_info"]["accelerator"]["device"] in ("cpu", "cuda")
    [b1, b2] = sorted(data["benchmarks"], key=lambda b: b["extra_info"]["batch_size"])
    for bench, size in ((b1, 1), (b2, 2)):
        info = bench["extra_info"]
        assert info["cell"] == f"bs{size}-beam1" and info["beam_width"] == 1
        assert info["batches"] == 16 == bench["stats"]["rounds"] and info["sequences"] == 16 * size
        assert info["sequences_per_s"] > 0 and 0 < info["generated_tokens"] <= 8 * 16 * size
        assert (
            abs(info["sequences_per_s"] - info["sequences"] / bench["stats"]["total"])
            < 0.01 * info["sequences_per_s"]
        )
        assert len(info["engine_fingerprint"]) == 64 and info["backend"] == "emulator"


@pytest.mark.slow  # the bundled engine
def test_benchmark_only_skips_the_quality_run(tmp_path: Path, small_dataset: Path, suites: Suites) -> None:
    out = tmp_path / "bench.json"
    proc = suites(
        "--batch-sizes",
        "2",
        "--beam-widths",
        "1",
        "--max-new-tokens",
        "8",
        "--dataset",
        str(small_dataset),
        "--report-dir",
        str(tmp_path / "r"),
        "--benchmark-only",
        f"--benchmark-json={out}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 7 skipped" in proc.stdout  # positions, limits, engine-wide, 4 schedules
    assert not list((tmp_path / "r").glob("*/report.json"))  # nothing generated for the quality tests
    assert [b["extra_info"]["cell"] for b in json.loads(out.read_text())["benchmarks"]] == ["bs2-beam1"]
