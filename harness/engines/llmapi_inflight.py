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
from collections.abc import Callable
from dataclasses import replace
from typing import cast

from harness.engines.base import Generation, InFlight, Pending, said_count
from harness.engines.protocols import AsyncLlm, Llm, RequestFuture, RequestOutput

# what the LLM API says of a prompt's tokens served from reused blocks (the warm schedule's sentence)
COUNTED = "the answer's cached_tokens says how many where the release reports it"


def request_generation(result: RequestOutput, call: str = "LLM.generate") -> Generation:
    """One request's RequestOutput as a Generation: its beams sorted by ``index``, beam 0 scored,
    every beam kept (the bulk path, ``harness.engines.llmapi``, and the in-flight path read
    answers alike)."""
    outputs = sorted(result.outputs, key=lambda o: getattr(o, "index", 0))
    if not outputs:
        raise RuntimeError(f"{call} returned a request without outputs")
    texts = tuple((o.text or "").strip() for o in outputs)
    return Generation(text=texts[0], token_ids=tuple(int(t) for t in outputs[0].token_ids), beams=texts)


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
        return replace(gen, cached_tokens=said_count(getattr(output, "cached_tokens", None)))


class LlmApiInFlight(InFlight):
    """``generate_async`` on one LLM with one SamplingParams (see the module docstring);
    ``submit`` and ``result()`` may be called from any thread."""

    def __init__(
        self, llm: Llm, sampling_params: object, cache: str, loaded: Callable[[], object], where: str
    ) -> None:
        """``loaded``: the LLM the engine holds now (a path refuses once its LLM was released);
        ``where``: the engine, as its errors name it."""
        self.llm, self.sampling_params, self.cache = llm, sampling_params, cache
        self.loaded, self.where = loaded, where
        self.lock = threading.Lock()
        self.unread: list[RequestFuture] = []  # sent, answer not read yet
        self.closed = False

    def submit(self, prompt: str) -> Pending:
        with self.lock:
            if self.closed:
                raise RuntimeError("the llmapi in-flight path is closed; open another with in_flight()")
        if self.loaded() is not self.llm:
            raise RuntimeError(f"{self.where}: the LLM this in-flight path was opened on was released")
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
