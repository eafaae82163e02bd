"""Issue 15, class 4: every call into a backend is guarded the way ``generate`` is.

``close()`` raising after a complete run is a warning and the report is kept;
``count_tokens()`` raising (or answering nonsense) and an engine module raising on import are
one line (exit 2 for ``python -m harness run``; the pytest side is in the bad-input matrix).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.__main__ import main
from tests.integration.common import grid_options

HERE = Path(__file__).resolve().parent


def _run(
    tmp_path: Path, engine: str, dataset: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(
        [
            "run",
            "--engine",
            engine,
            *grid_options(dataset, "1,2", "1"),
            "--report-dir",
            str(tmp_path / "reports"),
            "--goldens-dir",
            str(tmp_path / "goldens"),
            "--cache-dir",
            str(tmp_path / "cache"),
        ]
    )
    out = capsys.readouterr()
    return code, out.out, out.err


def test_close_raising_after_a_complete_run_keeps_the_report(
    tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    code, out, err = _run(tmp_path, "fault_engines:CloseRaises", small_dataset, capsys)
    assert code == 0, out + err
    [report] = (tmp_path / "reports").glob("*/report.json")
    assert json.loads(report.read_text())["verdict"] == "pass"
    assert (report.parent / "report.md").is_file() and (report.parent / "report.html").is_file()
    warnings = [line for line in err.splitlines() if line.strip() and not line.startswith("progress: ")]
    assert len(warnings) == 1 and "close() raised RuntimeError: CUDA error" in warnings[0]
    assert "Traceback" not in out + err


@pytest.mark.parametrize(
    "engine, words",
    [
        ("fault_engines:CountRaises", "count_tokens raised ValueError: tokenizer.json: unknown normalizer"),
        ("fault_engines:CountsWrong", "count_tokens returned int for 16 prompts"),
        ("raises_on_import:Engine", "importing 'raises_on_import' raised RuntimeError: CUDA driver"),
    ],
)
def test_other_backend_calls_are_one_line(
    tmp_path: Path,
    small_dataset: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    engine: str,
    words: str,
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    code, out, err = _run(tmp_path, engine, small_dataset, capsys)
    assert code == 2, out + err
    assert err.strip().splitlines() == [err.strip()] and words in err, err
    assert "Traceback" not in out + err
    assert not list((tmp_path / "reports").glob("*/generations.jsonl"))  # nothing generated
