"""The llmapi in-flight path (``LLM.generate_async``) against the TEST DOUBLE of every release line.

On the lines whose LLM API the backend runs (0.15-0.16, 1.x), requests sent one by one, several
before any answer is read, give what the bulk ``generate`` gives for the same prompts, beam
search included where the line's bulk path runs it, with the same SamplingParams; the line's
refusals come from ``submit`` as they come from ``generate``. 0.9 and 0.12 have no LLM API the
backend runs (refused at load, naming the release). The trtllm backend's in-flight path is tested
in test_trtllm_inflight.py. The doubles are not TensorRT-LLM: each says which release source it
was read from.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest

from harness.config import DecodingSettings, EngineOptions
from harness.engines.base import NoInFlight
from harness.engines.llmapi import LlmApiEngine
from harness.errors import EngineError
from harness.model.vocab import CacheReuse
from harness.stages.arrivals import drive
from tests.doubles import trtllm_common as common
from tests.doubles.trtllm_common import BUNDLED_MODEL
from tests.unit.engines.inflight_paths import answer, opened

PROMPTS = [
    "A short one. TL;DR: ",
    "A much longer prompt, with many more words in it than the first one has, so that "
    "the requests have different lengths. TL;DR: ",
    "Middle length prompt here, some words. TL;DR: ",
]
LLMAPI_LINES = {"0.15-0.16", "1.x"}  # the lines whose LLM API the backend runs
# what each line's RequestOutput says of cached prompt tokens with block reuse off
CACHED_OFF = {"0.15-0.16": None, "1.x": 0}  # 0.16 RequestOutput has no cached_tokens


def _engine(trt: ModuleType, tmp_path: Path, max_beam_width: int = 4, reuse: str = "off") -> LlmApiEngine:
    path = trt.make_engine_dir(tmp_path / "e", max_beam_width=max_beam_width, max_batch_size=8)
    options = EngineOptions(tokenizer=str(BUNDLED_MODEL), kv_cache_reuse=CacheReuse(reuse))
    return LlmApiEngine(path, options=options)


def _calls(runner: str) -> list[dict[str, Any]]:
    return [c for c in common.recorder().calls if c["runner"] == runner]


@pytest.fixture
def llmapi_line(trt_line: ModuleType) -> ModuleType:
    if trt_line.LINE not in LLMAPI_LINES:
        pytest.skip(f"TensorRT-LLM {trt_line.VERSION}: the llmapi backend refuses this line at load")
    return trt_line


def test_lines_without_the_llm_api_are_refused_naming_the_release(
    tmp_path: Path, trt_line: ModuleType
) -> None:
    if trt_line.LINE in LLMAPI_LINES:
        pytest.skip("the llmapi backend runs this line")
    with pytest.raises(EngineError, match=f"this is {trt_line.VERSION}"):
        _engine(trt_line, tmp_path)


@pytest.mark.parametrize("beams", [1, 2])
def test_requests_sent_one_by_one_give_generate_s_outputs(
    tmp_path: Path, llmapi_line: ModuleType, beams: int
) -> None:
    engine = _engine(llmapi_line, tmp_path)
    settings = DecodingSettings(beam_width=beams, max_new_tokens=9)
    bulk = engine.generate(PROMPTS, settings)
    path = opened(engine, settings)
    pending = [path.submit(p) for p in PROMPTS]  # all sent before any answer is read
    assert cast(Any, engine.llm).running_requests == len(PROMPTS)
    answers = {i: answer(pending[i]) for i in reversed(range(len(PROMPTS)))}  # read last first
    gens = [answers[i] for i in range(len(PROMPTS))]
    assert [(g.text, g.token_ids, g.beams) for g in gens] == [(g.text, g.token_ids, g.beams) for g in bulk]
    assert all(len(g.beams) == beams for g in gens)
    assert all(g.slot is None and g.cached_tokens == CACHED_OFF[llmapi_line.LINE] for g in gens)
    [generate] = _calls("LLM")
    sent = _calls("LLM.generate_async")
    assert [c["prompts"] for c in sent] == [[p] for p in PROMPTS]
    assert all(c["sampling_params"] == generate["sampling_params"] for c in sent)  # the bulk path's
    path.close()
    assert cast(Any, engine.llm).running_requests == 0


def test_the_schedule_driver_reads_answers_on_its_own_threads(
    tmp_path: Path, llmapi_line: ModuleType
) -> None:
    engine = _engine(llmapi_line, tmp_path)
    settings = DecodingSettings(beam_width=1, max_new_tokens=7)
    bulk = engine.generate(PROMPTS * 2, settings)
    before = set(threading.enumerate())
    path = opened(engine, settings)
    sent = drive(path, PROMPTS * 2, first_wave=3, cap=3, timeout=30)
    path.close()
    assert [s.generation.text if s.generation else None for s in sent] == [g.text for g in bulk]
    for thread in set(threading.enumerate()) - before:  # the driver's readers end with their answer
        thread.join(timeout=5)
    assert set(threading.enumerate()) <= before  # the path itself started none


def test_a_beam_width_the_engine_refuses_is_refused_at_submit_as_by_generate(
    tmp_path: Path, llmapi_line: ModuleType
) -> None:
    engine = _engine(llmapi_line, tmp_path, max_beam_width=1)
    settings = DecodingSettings(beam_width=2, max_new_tokens=8)
    with pytest.raises(ValueError) as bulk:
        engine.generate(PROMPTS[:1], settings)
    path = opened(engine, settings)
    with pytest.raises(ValueError) as sent:
        path.submit(PROMPTS[0])
    assert str(sent.value) == str(bulk.value)


def test_a_checkpoint_runs_in_flight_on_the_llm_loaded_for_the_beam_width(llmapi_line: ModuleType) -> None:
    """A checkpoint's LLM is loaded per beam width (1.x's PyTorch backend refuses any other
    width): the in-flight path opens on the bulk path's LLM for the setting."""
    engine = LlmApiEngine(BUNDLED_MODEL)
    settings = DecodingSettings(beam_width=2, max_new_tokens=6)
    bulk = engine.generate(PROMPTS[:2], settings)
    path = opened(engine, settings)
    pending = [path.submit(p) for p in PROMPTS[:2]]
    assert [answer(p).beams for p in pending] == [g.beams for g in bulk]
    assert engine.llm_beam_width == 2 and len(common.recorder().loads) == 2  # widths 1 (at load), 2
    engine.generate(PROMPTS[:1], DecodingSettings(beam_width=1, max_new_tokens=6))  # reloads width 1
    with pytest.raises(RuntimeError, match="was released"):
        path.submit(PROMPTS[0])


@pytest.mark.parametrize("reuse", ["off", "on"])
def test_warm_says_whether_block_reuse_is_on_and_what_the_release_counts(
    tmp_path: Path, llmapi_line: ModuleType, reuse: str
) -> None:
    engine = _engine(llmapi_line, tmp_path, reuse=reuse)
    path = opened(engine, DecodingSettings(beam_width=1, max_new_tokens=5))
    assert f"KV-cache block reuse is {reuse}" in path.cache and "enable_block_reuse" in path.cache
    first, again = (answer(path.submit(PROMPTS[1])) for _ in range(2))
    assert first.text == again.text
    if llmapi_line.LINE == "0.15-0.16":
        assert first.cached_tokens is again.cached_tokens is None  # its RequestOutput does not say
    else:
        assert first.cached_tokens == 0
        assert again.cached_tokens == (
            0 if reuse == "off" else len(engine.tokenizer([PROMPTS[1]])["input_ids"][0]) - 1
        )


def test_close_refuses_later_requests_and_aborts_unread_ones_where_the_release_can(
    tmp_path: Path, llmapi_line: ModuleType
) -> None:
    engine = _engine(llmapi_line, tmp_path)
    path = opened(engine, DecodingSettings(beam_width=1, max_new_tokens=5))
    path.submit(PROMPTS[0]).result()
    path.submit(PROMPTS[1])  # never read
    path.close()
    # 1.x: GenerationResult.abort(); 0.16's result class is not stored: no abort modelled
    assert cast(Any, engine.llm).running_requests == (0 if llmapi_line.LINE == "1.x" else 1)
    with pytest.raises(RuntimeError, match="closed"):
        path.submit(PROMPTS[0])
    other = opened(engine, DecodingSettings(beam_width=1, max_new_tokens=5))
    engine.close()  # closes the paths still open, then shuts the LLM down
    with pytest.raises(RuntimeError, match="closed"):
        other.submit(PROMPTS[0])
    assert common.recorder().shutdowns == 1


def test_an_llm_without_generate_async_has_no_in_flight_path(
    tmp_path: Path, llmapi_line: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a modelled line (both have generate_async): a release whose LLM lacks it is named."""
    engine = _engine(llmapi_line, tmp_path)
    monkeypatch.setattr(type(engine.llm), "generate_async", None)
    refused = engine.in_flight(DecodingSettings(beam_width=1, max_new_tokens=5))
    assert isinstance(refused, NoInFlight)
    assert f"TensorRT-LLM {llmapi_line.VERSION}" in refused.reason and "no generate_async" in refused.reason
