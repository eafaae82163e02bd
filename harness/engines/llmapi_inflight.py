"""The llmapi backend's in-flight path: ``LLM.generate_async``, one request per call.

``LLM.generate`` itself is a loop over ``generate_async`` (one call per prompt, then
``result()`` on each: ``llmapi/llm.py`` l.223-234 @42a7b09 = v0.16.0; ``BaseLLM.generate`` in
1.x), so sending the prompts one by one, at the times a schedule chooses, is the same request
the bulk cells send: the LLM the bulk path loads for the beam width (``_llm_for``) and the
SamplingParams it builds (``sampling``). Each request joins whatever the executor's in-flight
batching scheduler is already decoding.

``generate_async(inputs, sampling_params=None, lora_request=None, prompt_adapter_request=None,
streaming=False)`` (l.241-248 @42a7b09; 1.x adds keywords after ``streaming``) returns the
request's ``RequestOutput``, a ``GenerationResult`` whose ``result()`` blocks until it is done
and returns it; its answer is read as the bulk path reads one (``request_generation``). What
the LLM API does not say: the slot a request ran in (``slot`` None). What some releases say:
the prompt tokens served from reused KV-cache blocks, ``RequestOutput.cached_tokens`` (1.x
``GenerationResultBase``, set from the executor's response in ``_handle_response``; 0.16's
``RequestOutput`` has no such field, so None there).

``close()`` refuses later requests and aborts the ones not finished where the result has
``abort()`` (1.x ``GenerationResult.abort``); it leaves the LLM loaded for the bulk cells.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import cast

from harness.config import DecodingSettings
from harness.engines.base import Generation, InFlight, NoInFlight, Pending
from harness.engines.llmapi import LlmApiEngine, request_generation
from harness.engines.protocols import AsyncLlm, Llm, RequestFuture
from harness.model.vocab import CacheReuse


def open_in_flight(engine: LlmApiEngine, settings: DecodingSettings) -> InFlight | NoInFlight:
    """The in-flight path of ``engine`` for ``settings``, or why the release has none."""
    llm = engine._llm_for(settings.beam_width)
    if not callable(getattr(llm, "generate_async", None)):
        return NoInFlight(
            f"TensorRT-LLM {engine.version}'s LLM ({engine.info.details['llm_class']}) has no "
            "generate_async, the LLM API's one-request entry point"
        )
    return LlmApiInFlight(engine, llm, engine.sampling(settings))


def cache_sentence(engine: LlmApiEngine) -> str:
    """What a prompt sent again is served from, by the block reuse the LLM was loaded with."""
    status = engine.reuse.status
    if status.setting == CacheReuse.ON:
        return (
            f"KV-cache block reuse is on ({status.how}): a prompt sent again may be served its "
            "prefill from blocks an earlier request left; the answer's cached_tokens says how many "
            "where the release reports it"
        )
    if status.setting == CacheReuse.OFF:
        return f"KV-cache block reuse is off ({status.how}): a prompt sent again is prefilled afresh"
    return f"KV-cache block reuse is not known ({status.how})"


def _count(value: object) -> int | None:
    """A token count the release gave: a non-negative int, else not said."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class _Pending:
    """One request on its way; ``result()`` waits for its RequestOutput and reads it."""

    def __init__(self, path: LlmApiInFlight, future: RequestFuture) -> None:
        self.path, self.future = path, future

    def result(self) -> Generation:
        try:
            output = self.future.result()
        finally:
            self.path._forget(self.future)
        gen = request_generation(output, "LLM.generate_async")
        return replace(gen, cached_tokens=_count(getattr(output, "cached_tokens", None)))


class LlmApiInFlight(InFlight):
    """``generate_async`` on one LLM with one SamplingParams (see the module docstring);
    ``submit`` and ``result()`` may be called from any thread."""

    def __init__(self, engine: LlmApiEngine, llm: Llm, sampling_params: object) -> None:
        self.engine, self.llm, self.sampling_params = engine, llm, sampling_params
        self.cache = cache_sentence(engine)
        self.lock = threading.Lock()
        self.unread: list[RequestFuture] = []  # sent, answer not read yet
        self.closed = False

    def submit(self, prompt: str) -> Pending:
        with self.lock:
            if self.closed:
                raise RuntimeError("the llmapi in-flight path is closed; open another with in_flight()")
        if self.engine.llm is not self.llm:
            raise RuntimeError(f"{self.engine.path}: the LLM this in-flight path was opened on was released")
        future = cast(AsyncLlm, self.llm).generate_async(prompt, sampling_params=self.sampling_params)
        with self.lock:
            self.unread.append(future)
        return _Pending(self, future)

    def _forget(self, future: RequestFuture) -> None:
        with self.lock:
            if future in self.unread:
                self.unread.remove(future)

    def close(self) -> None:
        """Refuse later requests; abort the ones not finished where the release can."""
        with self.lock:
            self.closed = True
            left, self.unread = self.unread, []
        for future in left:
            abort = getattr(future, "abort", None)
            if getattr(future, "finished", False) is not True and callable(abort):
                abort()
