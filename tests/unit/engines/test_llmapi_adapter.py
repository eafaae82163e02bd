"""Contract tests of the llmapi backend against a TEST DOUBLE of TensorRT-LLM's LLM API.

The 1.x double (``tests/doubles/trtllm_1_x.py``) stands in for ``tensorrt_llm.LLM`` (the
PyTorch backend), ``_tensorrt_engine.LLM`` and ``SamplingParams``: keyword-only SamplingParams
with the real names, the real refusal of a beam width above an engine's max_beam_width, and
the PyTorch backend's rule that a request's beam width equals the LLM's max_beam_width.
``test_trtllm_contract.py`` runs the same contract against every release line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import pytest

from harness.config import DecodingSettings, EngineOptions
from harness.engines.llmapi import LlmApiEngine
from harness.engines.registry import load_engine
from harness.errors import EngineError
from harness.inputs.data import build_prompt
from harness.stages.plan_only import plan_only
from harness.stages.prepare import load_run_dataset
from harness.storage.fingerprint import weights_identity
from tests.doubles import trtllm_0_15
from tests.doubles import trtllm_1_x as double
from tests.doubles.trtllm_1_x import make_engine_dir
from tests.doubles.trtllm_common import BUNDLED_MODEL, Recorder, continuation
from tests.unit.engines.pipeline_runs import run_config, run_pipeline, written_report

TOKENIZER = EngineOptions(tokenizer=str(BUNDLED_MODEL))
PROMPTS = [
    "One. TL;DR: ",
    "Two words and then many more words than the first. TL;DR: ",
    "Three, a middle one. TL;DR: ",
]


@pytest.fixture
def trt(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    return double.install(monkeypatch)


def _expected(engine: LlmApiEngine, prompt: str, beams: int, new: int) -> tuple[str, ...]:
    ids = engine.tokenizer([prompt])["input_ids"][0]
    return tuple(
        engine.tokenizer.decode(continuation(ids, k, new, 2), skip_special_tokens=True).strip()
        for k in range(beams)
    )


def test_missing_tensorrt_llm_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)
    engine = make_engine_dir(tmp_path / "e", with_tokenizer=True)
    with pytest.raises(EngineError) as exc:
        load_engine(str(engine), "llmapi")
    assert (
        str(exc.value)
        == 'the llmapi backend needs TensorRT-LLM: pip install "batch-position-harness[trtllm]"'
    )


def test_engine_dir_beam_search_one_call_per_batch(tmp_path: Path, trt: Recorder) -> None:
    engine = LlmApiEngine(make_engine_dir(tmp_path / "e", max_beam_width=4), options=TOKENIZER)
    [load] = trt.loads
    assert load["runner"] == "tensorrt_llm.llmapi.llm._TrtLLM"  # 1.x: _tensorrt_engine.LLM
    assert load["model"] == str(tmp_path / "e") and load["tokenizer"] == str(BUNDLED_MODEL)
    assert load["trust_remote_code"] is False and "max_beam_width" not in load
    gens = engine.generate(PROMPTS, DecodingSettings(beam_width=4, max_new_tokens=9, length_penalty=0.7))
    [call] = trt.calls
    assert call["prompts"] == PROMPTS and call["use_tqdm"] is False
    sp = call["sampling_params"]
    assert (sp.use_beam_search, sp.n, sp.best_of, sp.max_tokens) == (True, 4, 4, 9)
    assert (sp.end_id, sp.pad_id, sp.length_penalty, sp.early_stopping) == (2, 3, 0.7, 1)
    for gen, prompt in zip(gens, PROMPTS):
        texts = _expected(engine, prompt, 4, 9)
        assert gen.beams == texts and gen.text == texts[0] and len(set(texts)) > 1


def test_greedy(tmp_path: Path, trt: Recorder) -> None:
    engine = LlmApiEngine(make_engine_dir(tmp_path / "e"), options=TOKENIZER)
    gens = engine.generate(PROMPTS[:2], DecodingSettings(beam_width=1, max_new_tokens=6))
    sp = trt.calls[0]["sampling_params"]
    assert (sp.use_beam_search, sp.n, sp.best_of, sp.top_k) == (False, 1, 1, 1)  # best_of defaults to n
    assert [g.beams for g in gens] == [_expected(engine, p, 1, 6) for p in PROMPTS[:2]]


def test_engine_refusal_keeps_its_message(tmp_path: Path, trt: Recorder) -> None:
    engine = LlmApiEngine(make_engine_dir(tmp_path / "e", max_beam_width=2), options=TOKENIZER)
    with pytest.raises(ValueError) as exc:
        engine.generate(PROMPTS, DecodingSettings(beam_width=4, max_new_tokens=8))
    assert str(exc.value) == (
        "sampling_params.n (4) cannot exceed max_beam_width (2) when use_beam_search is True"
    )


def test_before_1_0_engines_load_with_the_plain_llm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trt = trtllm_0_15.install(monkeypatch)  # 0.15/0.16: no _tensorrt_engine module
    engine = LlmApiEngine(trtllm_0_15.make_engine_dir(tmp_path / "e"), options=TOKENIZER)
    assert trt.loads[0]["runner"] == "tensorrt_llm.LLM"
    assert engine.info.details["llm_class"] == "tests.doubles.trtllm_0_15.LLM"


def test_checkpoint_gets_an_llm_per_beam_width(trt: Recorder) -> None:
    engine = LlmApiEngine(BUNDLED_MODEL)  # a Hugging Face checkpoint with its tokenizer
    assert engine.info.identity == weights_identity([BUNDLED_MODEL / "model.safetensors"])  # as hf
    assert engine.limits is None and engine.info.details["model"] == "checkpoint"
    for w in (1, 2, 2, 4, 1):
        gens = engine.generate(PROMPTS[:2], DecodingSettings(beam_width=w, max_new_tokens=5))
        assert [g.beams for g in gens] == [_expected(engine, p, w, 5) for p in PROMPTS[:2]]
    assert [load.get("max_beam_width") for load in trt.loads] == [1, 2, 4, 1]
    assert trt.shutdowns == 3
    engine.close()
    assert trt.shutdowns == 4


def test_checkpoint_reload_failure_is_a_cell_error_once(
    trt: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = LlmApiEngine(BUNDLED_MODEL)
    attempts: list[int] = []

    def broken(**kwargs: Any) -> NoReturn:
        attempts.append(kwargs["max_beam_width"])
        raise RuntimeError("CUDA out of memory\nmore lines")

    monkeypatch.setattr(engine, "llm_class", broken)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"max_beam_width 2 failed: RuntimeError: CUDA out of memory$"):
            engine.generate(PROMPTS[:1], DecodingSettings(beam_width=2, max_new_tokens=5))
    assert attempts == [2]


def test_trust_remote_code_is_passed_through(tmp_path: Path, trt: Recorder) -> None:
    path = make_engine_dir(tmp_path / "e", with_tokenizer=True)
    LlmApiEngine(path)
    LlmApiEngine(path, options=EngineOptions(trust_remote_code=True))
    assert [load["trust_remote_code"] for load in trt.loads] == [False, True]


def test_pipeline_with_llmapi(tmp_path: Path, small_dataset: Path, trt: Recorder) -> None:
    engine = make_engine_dir(tmp_path / "e", max_beam_width=1)
    config = run_config(
        tmp_path, small_dataset, engine, backend="llmapi", batch_sizes="1,4", beam_widths="1,2"
    )
    result = run_pipeline(config)
    assert result.report.engine.backend == "llmapi"
    cells = {c.cell.id: c for c in result.report.cells}
    assert cells["bs1-beam1"].verdict == cells["bs4-beam1"].verdict == "pass"
    for cell_id in ("bs1-beam2", "bs4-beam2"):
        assert cells[cell_id].error == (
            "ValueError: sampling_params.n (2) cannot exceed max_beam_width (1) when use_beam_search is True"
        )
    plan = plan_only(config).plan  # the run's plan, made again without loading the engine
    prompts = [build_prompt(config.prompt_template, d) for d in load_run_dataset(config).documents]
    expected: list[list[str]] = []
    for cell in plan.all_cells:
        batches = plan.batches(cell)
        for batch in batches[:1] if cell.beam_width == 2 else batches:
            expected.append([prompts[d] for d in batch.documents])
    assert [c["prompts"] for c in trt.calls if c["runner"] == "LLM"] == expected
    # the scheduled cells sent their requests one by one (generate_async), greedy ones only
    sent = [c for c in trt.calls if c["runner"] == "LLM.generate_async"]
    assert sent and all(len(c["prompts"]) == 1 and c["sampling_params"].n == 1 for c in sent)
    assert "submission order" in written_report(tmp_path)["engine"]["details"]["batch_position"]
