"""Issue 15, class 1: the generation cache is keyed by every input that can change an
output, not only the engine folder: the engine options (end/pad id, tokenizer by content,
runtime, ...), library versions and device; the key's inputs are in report.json."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.config import RunConfig
from harness.pipeline import RunOutcome, run
from tests.integration.common import run_options

HERE = Path(__file__).resolve().parents[2] / "integration"


def _run(tmp: Path, dataset: Path, **options: str) -> dict[str, Any]:
    engine = tmp / "engine"
    engine.mkdir(exist_ok=True)
    (engine / "weights.bin").write_text("the same engine files every time")
    values = run_options(
        tmp, dataset, "1,2", report="reports", engine=str(engine), backend="fault_engines:OptionsEcho"
    )
    values.update(options)
    result = run(RunConfig.from_options(values))
    assert isinstance(result, RunOutcome)
    report: dict[str, Any] = json.loads((result.folder / "report.json").read_text())
    return report


def test_another_end_id_reuses_no_generation(
    tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    first = _run(tmp_path, small_dataset, end_id="5")
    assert first["cache"]["generations_from_cache"] == 0
    second = _run(tmp_path, small_dataset, end_id="50")
    assert second["cache"]["generations_from_cache"] == 0  # was 48 of 48 before
    assert second["cache"]["batches_generated"] == first["cache"]["batches_generated"]
    again = _run(tmp_path, small_dataset, end_id="5")
    assert again["cache"]["batches_generated"] == 0  # same inputs: everything from the cache
    key = again["cache"]["key"]
    assert key["options"]["end_id"] == 5 and key["options"]["trtllm_runtime"] == "cpp"
    assert key["libraries"]["torch"] and key["libraries"]["transformers"]
    assert len(key["engine_files_sha256"]) == 64 and "gpu" in key["device"]


def test_tokenizer_folder_is_keyed_by_content(
    tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    (tok / "vocab.txt").write_text("vocab-one")
    _run(tmp_path, small_dataset, tokenizer=str(tok))
    (tok / "vocab.txt").write_text("vocab-two")  # same path, other tokenizer
    report = _run(tmp_path, small_dataset, tokenizer=str(tok))
    assert report["cache"]["generations_from_cache"] == 0
    assert report["cache"]["key"]["options"]["tokenizer"]["path"] == str(tok)


def test_the_emulators_own_code_keys_its_outputs(
    engine_factory: Callable[[int, int], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The emulator's outputs are decided by its source (drift, faults, decoding), the way a
    real engine's are by its build: a change to that code must reuse no cached generation."""
    from harness.engines.emulator import engine as emulator
    from harness.storage.cache import engine_fingerprint

    path = engine_factory(4, 2)
    before = emulator.EmulatorEngine(path).info
    assert before.details["emulator_code"] == emulator.code_digest()
    assert len(before.details["emulator_code"]) == 64
    monkeypatch.setattr(emulator, "code_digest", lambda: "0" * 64)  # as after an edit
    after = emulator.EmulatorEngine(path).info
    assert engine_fingerprint(after) != engine_fingerprint(before)
