"""`pytest suites/ --engine <transformers model dir>`: the hf backend end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import only_report

pytestmark = pytest.mark.slow  # the hf backend generates over a 2 x 2 grid


def test_hf_model_directory_runs_and_skips_limits(tmp_path: Path, small_dataset: Path, suites):
    from harness.engines.emulator.build import BUNDLED_MODEL

    proc = suites("--engine", str(BUNDLED_MODEL), "--dataset", str(small_dataset), "--batch-sizes", "1,2",
                  "--beam-widths", "1,2", "--max-new-tokens", "24", "--report-dir", str(tmp_path), "-v")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "test_engine_limits[bs2-beam2] SKIPPED" in proc.stdout
    report = only_report(tmp_path)
    assert report["engine"]["backend"] == "hf" and report["limits"] is None and report["memory"] == []
    assert all(c["degraded_positions"] == [] for c in report["cells"])
