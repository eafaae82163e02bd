"""The trtllm backend's in-flight path (the C++ runner's Executor: ``enqueue_request``, then
``await_responses`` by id) against the TEST DOUBLE of every release line.

On the lines whose ``ModelRunnerCpp`` holds an Executor (0.12-0.13, 0.15-0.16, 1.x), prompts sent
one by one decode together, several requests sharing the executor's steps, and each gives its
batch-size-1 bulk output, beam search included, with the bulk path's sampling; a request the
executor refuses (a prompt over ``max_input_len``, a beam width above the engine's) is that
request's own error, in the line's words; ``close()`` cancels what is unread and refuses later
requests. 0.9's ``ModelRunnerCpp`` (a ``GptSession``) and the Python ``ModelRunner`` of every line
batch statically: not applicable, with the source that says so. The doubles are not
TensorRT-LLM: each says which release source it was read from.
"""

from __future__ import annotations

import importlib
import threading
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest

from harness.config import DecodingSettings, EngineOptions
from harness.engines.base import NoInFlight
from harness.engines.trtllm import TrtllmEngine
from harness.model.vocab import CacheReuse, TrtllmRuntime
from harness.stages.arrivals import RequestsFailed, drive
from tests.doubles import trtllm_common as common
from tests.doubles.trtllm_common import BUNDLED_MODEL
from tests.doubles.trtllm_executor import InflightExecutor
from tests.unit.engines.inflight_paths import answer, opened

PROMPTS = [
    "A short one. TL;DR: ",
    "A much longer prompt, with many more words in it than the first one has, so that "
    "the requests have different lengths. TL;DR: ",
    "Middle length prompt here, some words. TL;DR: ",
]
TOO_LONG = "word " * 1100 + "TL;DR: "  # over the sample engine's max_input_len of 1024 tokens
EXECUTOR_LINES = {"0.12-0.13", "0.15-0.16", "1.x"}  # whose ModelRunnerCpp holds an Executor
# what each line's executor puts before the validation's message for a prompt too long
PROMPT_PREFIX = {"0.12-0.13": "", "0.15-0.16": "", "1.x": "Encountered an error when fetching new request: "}
# each line's answer to a request of 4 beams on an engine built with max_beam_width 2
TOO_WIDE = {
    "0.12-0.13": "Request with beam width 4 differs from the max beam width 2",
    "0.15-0.16": "TEST DOUBLE: request beam width 4 above the executor's max_beam_width 2 (the C++ check's "
    "text is not modelled)",
    "1.x": "Encountered an error in forwardAsync function: [TensorRT-LLM][ERROR] Assertion failed: "
    "Requested beam width 4 is larger than configured max beam width 2",
}


def _engine(
    trt: ModuleType, tmp_path: Path, *, max_beam_width: int = 4, runtime: str = "cpp", reuse: str = "off"
) -> TrtllmEngine:
    path = trt.make_engine_dir(tmp_path / "e", max_beam_width=max_beam_width, max_batch_size=8)
    options = EngineOptions(
        tokenizer=str(BUNDLED_MODEL), trtllm_runtime=TrtllmRuntime(runtime), kv_cache_reuse=CacheReuse(reuse)
    )
    return TrtllmEngine(path, options=options)


def _executor(engine: TrtllmEngine) -> InflightExecutor:
    executor = getattr(engine.runner, "executor", None) or getattr(engine.runner, "session", None)
    assert isinstance(executor, InflightExecutor)
    return executor


@pytest.fixture
def executor_line(trt_line: ModuleType) -> ModuleType:
    if trt_line.LINE not in EXECUTOR_LINES:
        pytest.skip(f"TensorRT-LLM {trt_line.VERSION}: ModelRunnerCpp holds no Executor")
    return trt_line


@pytest.mark.parametrize("beams", [1, 2])
def test_requests_decoded_together_give_each_prompt_s_batch_size_1_output(
    tmp_path: Path, executor_line: ModuleType, beams: int
) -> None:
    engine = _engine(executor_line, tmp_path)
    settings = DecodingSettings(beam_width=beams, max_new_tokens=9)
    alone = [engine.generate([p], settings)[0] for p in PROMPTS]  # batch size 1, one call each
    path = opened(engine, settings)
    executor = _executor(engine)
    executor.hold()  # all three queued before the executor's first step
    pending = [path.submit(p) for p in PROMPTS]
    executor.release()
    answers = [answer(pending[i]) for i in reversed(range(len(PROMPTS)))][::-1]  # read last first
    assert [(g.text, g.token_ids, g.beams) for g in answers] == [
        (g.text, g.token_ids, g.beams) for g in alone
    ]
    assert all(len(g.beams) == beams for g in answers)
    assert all(g.slot is None and g.cached_tokens is None for g in answers)  # the executor says neither
    assert executor.steps[0] == (1, 2, 3)  # the three requests shared the executor's steps
    bulk = [c for c in common.recorder().calls if c["runner"] == "ModelRunnerCpp"][-1]
    for call, prompt in zip(
        [c for c in common.recorder().calls if c["runner"] == "Executor.enqueue_request"], PROMPTS
    ):
        assert call["ids"] == engine.encode_one(prompt) and call["streaming"] is False
        assert (call["max_new_tokens"], call["end_id"], call["pad_id"]) == (9, bulk["end_id"], bulk["pad_id"])
        asked = {k: v for k, v in call["sampling"].items() if v is not None}
        assert asked == {  # the bulk call's sampling keywords, as ModelRunnerCpp renames them
            ("beam_width" if k == "num_beams" else k): bulk[k]
            for k in ("num_beams", "top_k", "length_penalty", "early_stopping")
            if k in bulk
        }
    path.close()


def test_requests_sent_on_a_schedule_join_the_ones_decoding(
    tmp_path: Path, executor_line: ModuleType
) -> None:
    engine = _engine(executor_line, tmp_path)
    settings = DecodingSettings(beam_width=1, max_new_tokens=9)
    alone = [engine.generate([p], settings)[0].text for p in PROMPTS * 2]
    path = opened(engine, settings)
    assert path.slots == 8 and path.fresh_slots is False  # the executor's max_batch_size
    sent = drive(path, PROMPTS * 2, first_wave=3, cap=3, timeout=30)
    path.close()
    assert [s.generation.text if s.generation else None for s in sent] == alone
    steps = _executor(engine).steps
    assert max(len(step) for step in steps) >= 2  # several requests shared a step
    assert any(set(a) != set(b) and set(a) & set(b) for a, b in zip(steps, steps[1:]))  # one joined others
    assert _executor(engine).running() == 0


def test_a_prompt_over_max_input_len_is_that_request_s_error_in_the_line_s_words(
    tmp_path: Path, executor_line: ModuleType
) -> None:
    engine = _engine(executor_line, tmp_path)
    settings = DecodingSettings(beam_width=1, max_new_tokens=8)
    path = opened(engine, settings)
    long, short = path.submit(TOO_LONG), path.submit(PROMPTS[0])  # enqueue refuses neither
    with pytest.raises(RuntimeError) as exc:
        long.result()
    length = len(engine.encode_one(TOO_LONG))
    assert str(exc.value) == (
        PROMPT_PREFIX[executor_line.LINE] + f"Prompt length ({length}) exceeds maximum input length (1024). "
        "Set log level to info and check TRTGptModel logs for how maximum input length is set"
    )
    assert answer(short).text == engine.generate([PROMPTS[0]], settings)[0].text  # the other is answered
    # the schedule driver says which request failed; the schedules stage makes that the cell's error
    with pytest.raises(RequestsFailed, match=r"request 2 of 3 raised: .*Prompt length \(\d+\) exceeds"):
        drive(path, [PROMPTS[0], TOO_LONG, PROMPTS[1]], first_wave=3, cap=3, timeout=30)
    path.close()


@pytest.mark.parametrize("beams", [2, 4])
def test_a_beam_width_is_served_up_to_the_engine_s_and_refused_above_as_the_line_does(
    tmp_path: Path, executor_line: ModuleType, beams: int
) -> None:
    engine = _engine(executor_line, tmp_path, max_beam_width=2)
    settings = DecodingSettings(beam_width=beams, max_new_tokens=8)
    path = opened(engine, settings)  # the bulk path's runner for the width: the engine's maximum for 4
    pending = [path.submit(p) for p in PROMPTS[:2]]
    if beams == 2:
        assert [len(answer(p).beams) for p in pending] == [2, 2]
        assert [answer(p).beams for p in pending] == [
            engine.generate([p], settings)[0].beams for p in PROMPTS[:2]
        ]
        return
    for request in pending:
        with pytest.raises(RuntimeError) as exc:
            request.result()
        assert str(exc.value).endswith(TOO_WIDE[executor_line.LINE]), str(exc.value)
    with pytest.raises(RuntimeError, match=r"Num beams \(4\) exceeds the engine or specified limit \(2\)"):
        engine.generate(PROMPTS[:1], settings)  # the bulk path: ModelRunnerCpp's own check, in Python


@pytest.mark.parametrize("runtime", ["cpp", "python"])
def test_runners_that_batch_statically_are_not_applicable_with_their_source(
    tmp_path: Path, trt_line: ModuleType, runtime: str
) -> None:
    if runtime == "cpp" and trt_line.LINE in EXECUTOR_LINES:
        pytest.skip("this line's ModelRunnerCpp holds an Executor")
    engine = _engine(trt_line, tmp_path, max_beam_width=2, runtime=runtime)
    loads = len(common.recorder().loads)
    refused = engine.in_flight(DecodingSettings(beam_width=2, max_new_tokens=5))
    assert isinstance(refused, NoInFlight)
    assert refused.reason.startswith(f"TensorRT-LLM {trt_line.VERSION}: ")
    if runtime == "python":
        assert "the Python ModelRunner batches statically" in refused.reason
        assert "tensorrt_llm/runtime/model_runner.py, ModelRunner.generate" in refused.reason
    else:
        assert "ModelRunnerCpp holds a GptSession, not an Executor, and batches statically" in refused.reason
        assert "model_runner_cpp.py" in refused.reason and "v0.9.0, 250d9c29" in refused.reason
    assert len(common.recorder().loads) == loads  # learnt without loading a runner for the width


def test_only_the_executor_s_leader_rank_has_a_path(
    tmp_path: Path, executor_line: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(executor_line, tmp_path)
    monkeypatch.setattr(_executor(engine), "can_enqueue_requests", lambda: False)
    refused = engine.in_flight(DecodingSettings(beam_width=1, max_new_tokens=5))
    assert isinstance(refused, NoInFlight) and "cannot enqueue requests" in refused.reason


def test_close_cancels_unread_requests_and_refuses_later_ones(
    tmp_path: Path, executor_line: ModuleType
) -> None:
    engine = _engine(executor_line, tmp_path)
    settings = DecodingSettings(beam_width=1, max_new_tokens=9)
    path = opened(engine, settings)
    executor = _executor(engine)
    read = path.submit(PROMPTS[0])
    assert answer(read).text
    unread = path.submit(PROMPTS[1])
    path.close()
    assert executor.running() == 0  # cancelled, and its last response read: nothing left in the executor
    with pytest.raises(RuntimeError, match="in-flight path is closed"):
        path.submit(PROMPTS[0])
    with pytest.raises(RuntimeError, match="was closed before this request was answered"):
        unread.result()
    assert engine.generate(PROMPTS[:1], settings)[0].text == answer(read).text  # the bulk path is untouched
    other = opened(engine, settings)
    engine.close()  # closes the paths still open, then shuts the executor down
    with pytest.raises(RuntimeError, match="in-flight path is closed"):
        other.submit(PROMPTS[0])
    assert common.recorder().shutdowns == 1 and not executor.alive


def test_a_reader_waiting_when_the_path_closes_is_told_so(tmp_path: Path, executor_line: ModuleType) -> None:
    engine = _engine(executor_line, tmp_path)
    path = opened(engine, DecodingSettings(beam_width=1, max_new_tokens=9))
    executor = _executor(engine)
    executor.hold()  # nothing is decoded: the reader waits
    pending = path.submit(PROMPTS[0])
    errors: list[BaseException] = []

    def read() -> None:
        try:
            pending.result()
        except RuntimeError as exc:
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    closing = threading.Thread(target=path.close)
    closing.start()
    reader.join(timeout=5)
    executor.release()  # the cancelled request's last response can come
    closing.join(timeout=10)
    assert not reader.is_alive() and not closing.is_alive()
    assert [str(e) for e in errors] == [
        "the trtllm in-flight path was closed before this request was answered"
    ]
    assert executor.running() == 0


def test_a_path_refuses_once_its_runner_is_released(tmp_path: Path, executor_line: ModuleType) -> None:
    engine = _engine(executor_line, tmp_path)
    path = opened(engine, DecodingSettings(beam_width=1, max_new_tokens=5))
    engine.generate(PROMPTS[:1], DecodingSettings(beam_width=2, max_new_tokens=5))  # loads width 2
    with pytest.raises(RuntimeError, match="was released"):
        path.submit(PROMPTS[0])


def test_a_shut_down_executor_refuses_as_the_line_does(tmp_path: Path, executor_line: ModuleType) -> None:
    engine = _engine(executor_line, tmp_path)
    path = opened(engine, DecodingSettings(beam_width=1, max_new_tokens=5))
    executor = _executor(engine)
    executor.hold()
    pending = path.submit(PROMPTS[0])
    executor.shutdown()
    with pytest.raises(RuntimeError) as enqueue:
        path.submit(PROMPTS[0])
    assert str(enqueue.value) == executor.SHUTDOWN_ENQUEUE
    with pytest.raises(RuntimeError) as awaited:
        pending.result()
    assert str(awaited.value) == executor.SHUTDOWN_AWAIT
    if executor_line.LINE == "1.x":  # the texts 1.x's executorImpl.cpp checks with
        assert str(enqueue.value).endswith("Shutdown called, cannot enqueue requests")
        assert str(awaited.value).endswith("Shutdown called")


def test_the_executor_double_awaits_as_the_lines_do(tmp_path: Path, executor_line: ModuleType) -> None:
    """The double's own rules the path relies on: a wait with nothing ready is an empty list, a
    non-streaming request's one response is final with the prompt's ids first, a finished id
    is answered as terminated, and the timeout is a timedelta (pybind's chrono caster)."""
    engine = _engine(executor_line, tmp_path)
    executor = _executor(engine)
    bindings = importlib.import_module("tensorrt_llm.bindings.executor")
    ids = engine.encode_one(PROMPTS[0])
    executor.hold()
    request_id = executor.enqueue_request(bindings.Request(ids, 4, end_id=2, pad_id=2))
    assert executor.await_responses(request_id, timedelta(milliseconds=10)) == []
    with pytest.raises(TypeError):
        executor.await_responses(request_id, 10)  # type: ignore[arg-type]
    executor.release()
    [response] = executor.await_responses(request_id, timedelta(seconds=5))
    assert not response.has_error() and response.result.is_final
    assert response.result.output_token_ids[0][: len(ids)] == ids
    [again] = executor.await_responses(request_id, timedelta(milliseconds=10))
    assert (
        again.has_error()
        and again.error_msg == f"ReqId {request_id} has already been processed and was terminated."
    )


@pytest.mark.parametrize("reuse", ["off", "on"])
def test_warm_says_whether_block_reuse_is_on_and_that_no_count_is_reported(
    tmp_path: Path, executor_line: ModuleType, reuse: str
) -> None:
    engine = _engine(executor_line, tmp_path, reuse=reuse)
    path = opened(engine, DecodingSettings(beam_width=1, max_new_tokens=5))
    on = reuse == "on"
    assert path.cache.startswith(f"KV-cache block reuse is {reuse} (ModelRunnerCpp.from_dir(")
    assert f"kv_cache_enable_block_reuse={on}" in path.cache
    assert ("do not say how many prompt tokens came from reused blocks" in path.cache) is on
    first, again = (answer(path.submit(PROMPTS[1])) for _ in range(2))
    assert first.text == again.text and first.cached_tokens is again.cached_tokens is None
    path.close()
