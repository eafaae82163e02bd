"""The trtllm backend's in-flight path: the C++ runner's Executor, one request per prompt.

From 0.10 a ``ModelRunnerCpp`` holds a ``tensorrt_llm.bindings.executor.Executor`` (``.session``,
``.executor`` in 1.x; ``trtllm_compat.executor_of``), and its ``generate`` is that executor's own
enqueue/await loop over a whole batch: one ``Request`` per prompt, ``enqueue_requests``, then the
responses awaited until each request's is final, a response error raised as
``RuntimeError(response.error_msg)`` (``tensorrt_llm/runtime/model_runner_cpp.py``, ``generate``,
``_initialize_and_fill_output``, ``_fill_output``: l.483-503, l.555, l.597-598 at
0.13.0.dev2024082000 = 04c5298; the same functions at v0.16.0 = 42a7b09 and in 1.x @03832911).
This path sends the same request one prompt at a time, at the times a schedule chooses, into the
executor of the runner the bulk cells use for the beam width (``TrtllmEngine._runner_for``), so
each request joins whatever the executor's in-flight batching is already decoding:

- the request: the prompt's token ids (the engine's tokenizer) and ``max_new_tokens``, both
  positional (the keyword is ``max_new_tokens`` at 0.13, ``max_tokens`` from 0.16 on), then
  ``streaming=False``, the SamplingConfig ``ModelRunnerCpp.generate`` builds from the bulk path's
  keywords (``num_beams`` renamed ``beam_width``: ``rename_params``, l.449 at 04c5298), a default
  OutputConfig (``exclude_input_from_output`` false: the prompt's ids stay in the output, as the
  bulk path reads them; no logits asked for) and ``end_id``/``pad_id``;
- ``enqueue_request(request)`` returns the request's id; what it raises (an executor shut down)
  is that request's error;
- ``result()`` awaits that id alone, ``await_responses(id, timeout)`` (the executor keeps each
  request's responses apart, so the path never takes another request's answer), in waits of
  ``POLL`` so that ``close()`` can stop it; an error response raises ``RuntimeError(error_msg)``
  as ``_fill_output`` does: the executor answers a prompt longer than its ``max_input_len``, or a
  beam width it does not serve, that way, not from ``enqueue_request``. The final result's beams
  are cut and read as the bulk path's are (``TrtllmEngine.answer``: beam 0 scored, all kept);
- what the executor does not say: the slot a request ran in (``slot`` None) and how many prompt
  tokens it served from reused KV-cache blocks (0.13's and 0.16's ``Result`` have no such field;
  1.x counts reused *blocks*, in perf metrics not asked for): ``cached_tokens`` None, and the
  ``cache`` sentence says so. ``slots`` is the runner's ``max_batch_size``, the executor's;
- ``close()`` refuses later requests, cancels the ones not answered yet (``cancel_request``) and
  reads their last response, so that no answer is left in the executor for the bulk path's
  ``await_responses`` (1.x's awaits every id at once) to meet; the executor stays up for the
  bulk cells.

``tensorrt_llm`` is imported by the engine when it opens a path, never when this module is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Protocol

from harness.engines.base import Generation, InFlight, Pending
from harness.engines.protocols import Executor

POLL = timedelta(milliseconds=100)  # one await_responses wait: how soon close() stops a reader
DRAIN_S = 30.0  # how long close() waits for the cancelled requests' last responses, all together
RENAMED = {"num_beams": "beam_width"}  # ModelRunnerCpp.generate's rename_params (0.13 on)
# what the executor says of a prompt's tokens served from reused blocks (the warm schedule's sentence)
COUNTED = (
    "the executor's responses do not say how many prompt tokens came from reused blocks, so no "
    "cached-token count is reported"
)
CLOSED = "the trtllm in-flight path is closed; open another with in_flight()"


class Sender(Protocol):
    """What the path reads of the trtllm engine (``TrtllmEngine``): the runner it holds now, and
    how it encodes a prompt and reads a request's final beams."""

    @property
    def runner(self) -> object: ...

    def encode_one(self, prompt: str) -> list[int]: ...

    def answer(self, prompt_len: int, beams: Sequence[Sequence[int]], width: int) -> Generation: ...


def executor_sampling(keywords: Mapping[str, object]) -> dict[str, object]:
    """The bulk path's ``generate`` sampling keywords as the executor's SamplingConfig takes them."""
    return {RENAMED.get(key, key): value for key, value in keywords.items()}


@dataclass(frozen=True)
class RequestMaker:
    """One executor ``Request`` per prompt, for one decoding setting (see the module docstring)."""

    bindings: ModuleType  # tensorrt_llm.bindings.executor
    sampling: object  # its SamplingConfig
    max_new_tokens: int
    end_id: int
    pad_id: int

    @classmethod
    def of(
        cls,
        bindings: ModuleType,
        keywords: Mapping[str, object],
        max_new_tokens: int,
        end_id: int,
        pad_id: int,
    ) -> RequestMaker:
        """From the bulk path's sampling keywords (``trtllm.sampling_keywords``)."""
        return cls(
            bindings, bindings.SamplingConfig(**executor_sampling(keywords)), max_new_tokens, end_id, pad_id
        )

    def __call__(self, ids: list[int]) -> object:
        request: object = self.bindings.Request(
            ids,
            self.max_new_tokens,
            streaming=False,
            sampling_config=self.sampling,
            output_config=self.bindings.OutputConfig(),
            end_id=self.end_id,
            pad_id=self.pad_id,
        )
        return request


class _Request:
    """One enqueued request; ``result()`` reads its answer (once, from any thread)."""

    def __init__(self, path: TrtllmInFlight, request_id: int, prompt_len: int) -> None:
        self.path, self.id, self.prompt_len = path, request_id, prompt_len
        self.reading = threading.Lock()  # one reader of this id at a time
        self.final = False  # its last response was read (or the executor can give none)
        self.outcome: Generation | Exception | None = None

    def result(self) -> Generation:
        with self.reading:
            if self.outcome is None:
                self.outcome = self._read()
        self.path._forget(self)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome

    def _read(self) -> Generation | Exception:
        try:
            beams = self.path._last(self, stop=lambda: self.path.closed)
            if beams is None:
                return RuntimeError("the trtllm in-flight path was closed before this request was answered")
            return self.path.engine.answer(self.prompt_len, beams, self.path.width)
        except Exception as exc:  # the executor's error response, or its refusal: this request's
            return exc

    def cancel(self) -> bool:
        """Cancel it if it is not answered yet; False where nothing is left to read."""
        if self.final:
            return False
        try:
            self.path.executor.cancel_request(self.id)
        except Exception:  # the executor is shut down: nothing is left in it to read
            return False
        return True

    def drain(self, deadline: float) -> None:
        """Read its last response (a cancelled request's), until ``deadline`` at most."""
        with self.reading:  # a reader stops within one POLL once the path is closed
            if self.final:
                return
            try:
                self.path._last(self, stop=lambda: time.monotonic() > deadline)
            except Exception:  # an error response is its last too
                pass


class TrtllmInFlight(InFlight):
    """Requests enqueued one by one on a runner's Executor (see the module docstring);
    ``submit`` and ``result()`` may be called from any thread."""

    def __init__(
        self,
        engine: Sender,
        runner: object,
        executor: Executor,
        make: Callable[[list[int]], object],
        width: int,
        *,
        slots: int | None,
        cache: str,
        where: str,
    ) -> None:
        """``runner``: the engine's runner now, whose ``executor`` this is (a path refuses once the
        engine holds another); ``width``: the beam width each request asks for; ``where``: the
        engine, as its errors name it."""
        self.engine, self.runner, self.executor, self.make, self.width = engine, runner, executor, make, width
        self.slots, self.cache, self.where = slots, cache, where
        self.lock = threading.Lock()
        self.unread: dict[int, _Request] = {}  # enqueued, answer not read yet
        self.closed = False

    def submit(self, prompt: str) -> Pending:
        with self.lock:
            if self.closed:
                raise RuntimeError(CLOSED)
        if self.engine.runner is not self.runner:
            raise RuntimeError(
                f"{self.where}: the runner this in-flight path was opened on was released "
                "(another beam width was loaded, or the engine closed)"
            )
        ids = self.engine.encode_one(prompt)
        request = _Request(self, self.executor.enqueue_request(self.make(ids)), len(ids))
        with self.lock:
            late = self.closed
            if not late:
                self.unread[request.id] = request
        if late:  # closed while it was being enqueued
            if request.cancel():
                request.drain(time.monotonic() + DRAIN_S)
            raise RuntimeError(CLOSED)
        return request

    def _last(self, request: _Request, stop: Callable[[], bool]) -> list[list[int]] | None:
        """The request's final beams (None: ``stop`` came first); RuntimeError for an error
        response, the executor's own exception where it refuses to answer."""
        while not stop():
            try:
                responses = self.executor.await_responses(request.id, POLL)
            except Exception:
                request.final = True  # a shut-down executor answers nothing more
                raise
            for response in responses:
                if response.has_error():
                    request.final = True
                    raise RuntimeError(response.error_msg)
                result = response.result
                if result.is_final:
                    request.final = True
                    return [[int(t) for t in beam] for beam in result.output_token_ids]
        return None

    def _forget(self, request: _Request) -> None:
        with self.lock:
            self.unread.pop(request.id, None)

    def close(self) -> None:
        """Refuse later requests; cancel the unanswered ones and read their last responses."""
        with self.lock:
            self.closed = True
            left, self.unread = list(self.unread.values()), {}
        cancelled = [request for request in left if request.cancel()]
        deadline = time.monotonic() + DRAIN_S
        for request in cancelled:
            request.drain(deadline)
