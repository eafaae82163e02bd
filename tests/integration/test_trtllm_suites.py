"""`pytest suites/` on a TensorRT-LLM engine directory, with a TEST DOUBLE of tensorrt_llm.

The double (tests/doubles/tensorrt_llm_double.py) enforces the real runner signatures and
refusal messages; here it shows how a refused cell reaches the user through the plugin.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO, only_report, run_suites
from tests.doubles.tensorrt_llm_double import BUNDLED_MODEL, make_engine_dir


def test_refused_cells_fail_with_the_runners_message(tmp_path: Path, small_dataset: Path):
    engine = make_engine_dir(tmp_path / "engine", max_beam_width=1)
    proc = run_suites("-p", "tests.doubles.use_tensorrt_llm_double", "--engine", str(engine),
                      "--tokenizer", str(BUNDLED_MODEL), "--dataset", str(small_dataset),
                      "--batch-sizes", "1,4", "--beam-widths", "1,2", "--max-new-tokens", "16",
                      "--no-cache", "--report-dir", str(tmp_path / "r"), "-v",
                      cwd=tmp_path, env={"PYTHONPATH": str(REPO)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "test_batch_positions[bs4-beam1] PASSED" in out
    assert "test_batch_positions[bs4-beam2] FAILED" in out
    assert "test_engine_limits[bs4-beam2] FAILED" in out
    assert ("bs4-beam2: engine error: RuntimeError: Num beams (2) exceeds the engine or specified "
            "limit (1)") in out
    assert "Traceback" not in out
    report = only_report(tmp_path / "r")
    assert report["engine"]["backend"] == "trtllm"
    assert report["options"]["tokenizer"] == str(BUNDLED_MODEL)
    assert report["options"]["trust_remote_code"] is False
