"""`pytest suites/` on a TensorRT-LLM engine directory, with the TEST DOUBLE of each release line.

``-p tests.doubles.use_tensorrt_llm_double`` installs the line named by ``TRTLLM_DOUBLE_LINE``
(tests/doubles/lines.py) in the run (in this process, pytester); each double keeps its line's
runner signatures, output layout and refusal messages. Here a refused cell reaches the user through the plugin, and on every line
the cells the engine can run pass (on 0.12-0.13 only with a runner per beam width).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import only_report
from tests.doubles.lines import ENV, LINES
from tests.doubles.trtllm_common import BUNDLED_MODEL
from tests.integration.common import Suites, grid_options


@pytest.mark.parametrize("name", list(LINES))
def test_refused_cells_fail_with_the_runners_message(
    tmp_path: Path, small_dataset: Path, name: str, suites: Suites
) -> None:
    engine = LINES[name].make_engine_dir(tmp_path / "engine", max_beam_width=2, max_batch_size=8)
    proc = suites(
        "-p",
        "tests.doubles.use_tensorrt_llm_double",
        "--engine",
        str(engine),
        "--tokenizer",
        str(BUNDLED_MODEL),
        *grid_options(small_dataset, "1,4", "1,2,4"),
        "--max-new-tokens",
        "16",
        "--no-cache",
        "--report-dir",
        str(tmp_path / "r"),
        "-v",
        env={ENV: name},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "test_batch_positions[bs4-beam1] PASSED" in out
    assert "test_batch_positions[bs4-beam2] PASSED" in out
    assert "test_batch_positions[bs4-beam4] FAILED" in out
    assert "test_engine_limits[bs4-beam4] FAILED" in out
    assert (
        "bs4-beam4: engine error: RuntimeError: Num beams (4) exceeds the engine or specified limit (2)"
    ) in out
    assert "Traceback" not in out
    report = only_report(tmp_path / "r")
    assert report["engine"]["backend"] == "trtllm"
    assert report["engine"]["details"]["tensorrt_llm"] == LINES[name].VERSION
    assert report["options"]["tokenizer"] == str(BUNDLED_MODEL)
    assert report["options"]["trust_remote_code"] is False
