"""Issue 15, class 12: load options a backend would ignore are refused in one line naming
them (they were accepted and silently ignored by the emulator and hf backends)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import EngineOptions
from harness.engines.emulator.build import BUNDLED_MODEL
from harness.engines.registry import load_engine
from harness.errors import EngineError
from harness.model.vocab import TrtllmRuntime

HERE = Path(__file__).resolve().parents[2] / "integration"


@pytest.mark.parametrize(
    "options, flags",
    [
        (EngineOptions(end_id=5), "--end-id does not apply"),
        (EngineOptions(pad_id=0), "--pad-id does not apply"),
        (EngineOptions(tokenizer=str(BUNDLED_MODEL)), "--tokenizer does not apply"),
        (EngineOptions(trtllm_runtime=TrtllmRuntime.PYTHON), "--trtllm-runtime does not apply"),
        (EngineOptions(trust_remote_code=True, end_id=2), "--end-id and --trust-remote-code do not apply"),
    ],
)
@pytest.mark.parametrize("engine, backend", [("bundled", None), (str(BUNDLED_MODEL), "hf")])
def test_options_the_backend_ignores_are_refused(
    engine: str, backend: str | None, options: EngineOptions, flags: str
) -> None:
    label = backend or "emulator"
    with pytest.raises(EngineError, match=f"{flags} to the {label} backend") as exc:
        load_engine(engine, backend, options)
    assert "drop" in str(exc.value)


def test_a_user_class_without_options_gets_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    with pytest.raises(EngineError, match="--end-id does not apply to the toy_engine:ToyEngine"):
        load_engine("toy_engine:ToyEngine", None, EngineOptions(end_id=5))
    load_engine("toy_engine:ToyEngine", None, EngineOptions())  # nothing given: loads


def test_a_class_that_takes_options_gets_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    engine = load_engine(
        str(tmp_path),
        "fault_engines:OptionsEcho",
        EngineOptions(end_id=5, trtllm_runtime=TrtllmRuntime.PYTHON),
    )
    assert engine.options.end_id == 5  # type: ignore[attr-defined]  # fault_engines.OptionsEcho keeps them


def test_llmapi_declares_it_reads_no_runtime() -> None:
    from harness.engines.llmapi import LlmApiEngine
    from harness.engines.registry import refuse_unread

    refuse_unread(LlmApiEngine, "llmapi", EngineOptions(end_id=3, tokenizer="t"))
    with pytest.raises(EngineError, match="--trtllm-runtime does not apply to the llmapi backend"):
        refuse_unread(LlmApiEngine, "llmapi", EngineOptions(trtllm_runtime=TrtllmRuntime.PYTHON))
