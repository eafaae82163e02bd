"""The TensorRT-LLM release-line rules (harness.engines.trtllm_compat), the adapters' fallbacks
for releases between the modelled ones, and the refusals the doubles model (issue 14 B.4)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.config import DecodingSettings, EngineOptions
from harness.engines import trtllm_compat as compat
from harness.engines.llmapi import LlmApiEngine
from harness.engines.trtllm import TrtllmEngine
from tests.doubles import trtllm_0_12, trtllm_0_15, trtllm_1_x
from tests.doubles import trtllm_common as common
from tests.doubles.trtllm_common import BUNDLED_MODEL


def test_rejected_keyword_reads_both_lines_wordings() -> None:
    keys = {"max_beam_width": 2, "cuda_graph_config": None}
    assert (
        compat.rejected_keyword(
            TypeError("LlmArgs.__init__() got an unexpected keyword argument 'max_beam_width'"), keys
        )
        == "max_beam_width"
    )
    assert (
        compat.rejected_keyword(ValueError("LLM got invalid argument: cuda_graph_config"), keys)
        == "cuda_graph_config"
    )
    assert compat.rejected_keyword(RuntimeError("CUDA out of memory"), keys) is None


def test_shutdown_prefers_shutdown_then_private_then_the_executor() -> None:
    calls: list[str] = []

    class New:
        def shutdown(self) -> None:
            calls.append("shutdown")

        def _shutdown(self) -> None:
            calls.append("_shutdown")

    class Old:
        def _shutdown(self) -> None:
            calls.append("_shutdown")

    class Runner:  # ModelRunnerCpp to 0.16
        session = New()

    class Runner1x:  # ModelRunnerCpp of 1.x (model_runner_cpp.py: self.executor)
        executor = New()

    for obj in (New(), Old(), Runner(), Runner1x(), object()):
        compat.shutdown(obj)
    assert calls == ["shutdown", "_shutdown", "shutdown", "shutdown"]


def test_release_leaves_no_reference_behind() -> None:
    """What has no shutdown (0.9's GptSession) is freed by release itself, cycles included."""
    import weakref

    class Session:
        def __init__(self) -> None:
            self.me = self  # a cycle: freed only by the collector

    slot: list[object] = [Session()]
    ref = weakref.ref(slot[0])
    compat.release(slot)
    assert slot == [] and ref() is None


def test_a_1x_release_without_cuda_graph_config_drops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """'in some releases cuda_graph_config=None': a release that names it unknown gets the rest."""
    trtllm_1_x.install(monkeypatch)

    @dataclass(kw_only=True)
    class OlderTorchArgs(trtllm_1_x._CommonArgs):
        disable_overlap_scheduler: bool = False

    monkeypatch.setattr(trtllm_1_x.LLM, "ARGS", OlderTorchArgs)
    engine = LlmApiEngine(BUNDLED_MODEL)
    gens = engine.generate(["One. TL;DR: "], DecodingSettings(beam_width=2, max_new_tokens=4))
    assert len(gens[0].beams) == 2
    last = common.recorder().loads[-1]
    assert last["max_beam_width"] == 2 and last["disable_overlap_scheduler"] is True
    assert "cuda_graph_config" not in last


def test_a_failed_reload_fails_its_cells_once_with_the_runner_s_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trtllm_0_12.install(monkeypatch)
    path = trtllm_0_12.make_engine_dir(tmp_path / "e", max_beam_width=4, max_batch_size=8)
    engine = TrtllmEngine(path, options=EngineOptions(tokenizer=str(BUNDLED_MODEL)))
    tries: list[int] = []
    real = trtllm_0_12.ModelRunnerCpp.from_dir

    def out_of_memory(engine_dir: str, **kwargs: Any) -> trtllm_0_12.ModelRunnerCpp:
        if kwargs.get("max_beam_width") == 2:
            tries.append(2)
            raise RuntimeError("[TensorRT-LLM][ERROR] CUDA out of memory\nstack")
        return real(engine_dir, **kwargs)

    monkeypatch.setattr(trtllm_0_12.ModelRunnerCpp, "from_dir", out_of_memory)
    for _ in range(2):
        with pytest.raises(
            RuntimeError,
            match=r"max_beam_width 2 failed: RuntimeError: \[TensorRT-LLM\]"
            r"\[ERROR\] CUDA out of memory$",
        ):
            engine.generate(["One. TL;DR: "], DecodingSettings(beam_width=2, max_new_tokens=4))
    assert tries == [2]
    assert len(engine.generate(["One. TL;DR: "], DecodingSettings(beam_width=1, max_new_tokens=4))) == 1


# --- the refusals each LLM API double models, with their types ---------------------------------


def test_1x_pytorch_backend_refuses_a_request_of_another_beam_width(monkeypatch: pytest.MonkeyPatch) -> None:
    trtllm_1_x.install(monkeypatch)
    from tensorrt_llm import LLM, SamplingParams
    from tensorrt_llm.executor.utils import RequestError

    llm = LLM(
        model=str(BUNDLED_MODEL), max_beam_width=4, disable_overlap_scheduler=True, cuda_graph_config=None
    )
    with pytest.raises(
        RequestError, match="Request beam width 2 is not equal to max_beam_width 4. This is not supported!"
    ):
        llm.generate(["x"], SamplingParams(max_tokens=4, n=1, best_of=2, use_beam_search=True))
    with pytest.raises(ValueError, match="LLM got invalid argument: beam_width"):
        LLM(model=str(BUNDLED_MODEL), beam_width=2)


def test_1x_sampling_params_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    trtllm_1_x.install(monkeypatch)
    from tensorrt_llm import SamplingParams

    with pytest.raises(ValueError, match=r"^best_of \(1\) cannot be less than n \(2\)$"):
        SamplingParams(n=2, best_of=1, use_beam_search=True)
    with pytest.raises(ValueError, match="TLLM_ALLOW_N_GREEDY_DECODING=1 to allow best_of > 1"):
        SamplingParams(n=1, best_of=2, top_k=1)
    monkeypatch.setenv("TLLM_ALLOW_N_GREEDY_DECODING", "1")
    assert SamplingParams(n=1, best_of=2, top_k=1).best_of == 2
    assert not hasattr(SamplingParams(n=2, use_beam_search=True), "beam_width")


def test_0_16_wording_and_missing_max_beam_width(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    trtllm_0_15.install(monkeypatch)
    from tensorrt_llm import LLM, SamplingParams

    with pytest.raises(TypeError, match="unexpected keyword argument 'max_beam_width'"):
        LLM(model=str(BUNDLED_MODEL), max_beam_width=2)
    llm = LLM(
        model=str(trtllm_0_15.make_engine_dir(tmp_path / "e", max_beam_width=2)), tokenizer=str(BUNDLED_MODEL)
    )
    with pytest.raises(
        ValueError,
        match=r"sampling_params's beam_width \(4\) should not exceed "
        r"max_beam_width \(2\)",
    ):
        llm.generate(["x"], SamplingParams(beam_width=4, max_tokens=4))
    assert not hasattr(llm, "shutdown") and callable(llm._shutdown)
    assert (
        "tensorrt_llm._tensorrt_engine" in sys.modules
        and sys.modules["tensorrt_llm._tensorrt_engine"] is None
    )
