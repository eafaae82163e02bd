"""What the per-release TEST DOUBLES of ``tensorrt_llm`` share of ``tensorrt_llm.bindings.executor``:
the ``Executor`` a ``ModelRunnerCpp`` (0.10 on) and an ``LLM`` hold, and, for the trtllm
backend's in-flight path, its one-request-at-a-time calls (``enqueue_request``,
``await_responses(id, timeout)``, ``cancel_request``) with the ``Request``/``Response``/``Result``
they pass. None of this is TensorRT-LLM. What is here is the same in the source of every line
that has an Executor, each place named by line; what differs (a line's refusal texts, its
``Request`` and ``SamplingConfig`` parameters) each line's module sets, with its source:

- the calls and their Python names: ``enqueue_request(request)`` returns the request's id,
  ``await_responses(id, timeout=None)`` a list of responses, ``cancel_request(id)``,
  ``can_enqueue_requests()``, ``shutdown()`` (``pybind/executor/executor.cpp`` l.105-125 at
  0.13.0.dev2024082000 = 04c5298; ``Executor`` in ``executor/executor.h`` @v0.16.0 = 42a7b09;
  1.x: ``executorImpl.cpp`` at 1.2.0rc2 = b35ac1b6 and the stored ``pybind/executor/executor.cpp``
  @0396172). The timeout is a ``std::chrono::milliseconds``: a ``datetime.timedelta`` from Python
  (``pybind11/chrono.h``, l.23 at 04c5298; the bindings' own tests pass
  ``datetime.timedelta(milliseconds=1)``, ``tests/bindings/test_executor_bindings.py`` l.149);
- in-flight batching: every step, queued requests join the ones decoding, up to the executor's
  ``max_batch_size``, and each active request gets one token; a non-streaming request's one
  response comes when it is done, ``is_final`` set, ``output_token_ids[k]`` beam ``k``'s ids with
  the prompt's first unless ``OutputConfig.exclude_input_from_output`` (``executor.h`` ``Result``
  l.399-431, ``OutputConfig`` l.162-172 at 04c5298; the tests' ``get_expected_num_tokens``
  l.43-47: prompt plus new tokens when not streaming); how the closed scheduler picks a step's
  requests is not modelled (first come, first served);
- awaiting an id: with a timeout and nothing ready, an empty list (``test_gpt_executor_timed_out``
  l.691-704 at 04c5298; ``Executor::Impl::awaitResponses``, ``wait_for`` then nothing stored, at
  b35ac1b6); an id whose final response was read answers an error response "ReqId N has already
  been processed and was terminated." (``test_multi_request_with_ids`` l.371-377 at 04c5298;
  ``awaitResponses(IdType, ...)`` at b35ac1b6; 0.16's closed executor: taken to be the same);
- what ``enqueue_request`` accepts and the executor answers with an error response instead: a
  request's own faults come back as that request's error, not from ``enqueue_request``
  (``test_single_request_invalid_inputs`` l.707-735 at 04c5298: the request is enqueued, its
  response has the error; at b35ac1b6 ``fetchNewRequests`` catches the validation's exception
  into an error response). The validation (``LlmRequest::validate``: ``llmRequest.h`` l.260-312 at
  04c5298, ``GenericLlmRequest::validate`` in ``llmRequest.h`` @42a7b09, ``llmRequest.cpp`` in 1.x)
  throws for a prompt longer than ``max_input_len`` ("Prompt length (P) exceeds maximum input
  length (M). Set log level to info and check TRTGptModel logs for how maximum input length is
  set", ``TLLM_THROW``: no assertion prefix; the source location and stack trace
  ``TllmException`` appends, ``common/tllmException.cpp`` l.38-45 at 04c5298, are left out here)
  and cuts ``max_new_tokens`` to what ``max_seq_len`` leaves (a warning, not a refusal). What a
  line puts before the message, and its beam-width rule, are the line's (``PROMPT_PREFIX``,
  ``beam_error``);
- after ``shutdown()``: ``can_enqueue_requests()`` is false and ``enqueue_request``,
  ``await_responses`` and ``cancel_request`` raise (``test_shutdown`` l.78-110 at 04c5298,
  ``pytest.raises(Exception)``; ``TLLM_CHECK_WITH_INFO(!mShutdownCalled, ...)`` at b35ac1b6); a
  ``TllmException`` is a ``std::runtime_error`` (``common/tllmException.h`` l.30 at 04c5298),
  which the bindings raise as RuntimeError. The texts are the line's (``SHUTDOWN_ENQUEUE``,
  ``SHUTDOWN_AWAIT``);
- ``cancel_request`` ends the request: its last response is final with the tokens so far (1.x:
  ``LlmRequest::finishByReason(kCANCELLED)``; 0.13's and 0.16's executors are closed source and
  their ``FinishReason`` has no CANCELLED at 04c5298: taken to end it the same way).

Test scaffolding (not a model of anything): ``hold()``/``release()`` keep the decode loop from
stepping while a test enqueues several requests, ``steps`` records which requests each step
decoded together, and the loop pauses ``STEP_S`` between steps so that requests sent a moment
apart overlap; the "model" is ``trtllm_common.generated`` at batch position 0 (a request's
batch-size-1 output).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tests.doubles import trtllm_common as common
from tests.doubles.signatures import Args
from tests.doubles.trtllm_common import Limits

TERMINATED = "ReqId {id} has already been processed and was terminated."
TOO_LONG = (
    "Prompt length ({prompt}) exceeds maximum input length ({limit}). Set log level to info and check "
    "TRTGptModel logs for how maximum input length is set"
)


class Executor:
    """Stand-in for ``tensorrt_llm.bindings.executor.Executor`` as a holder of the GPU (``ModelRunnerCpp
    .session`` from 0.10 on, an ``LLM``'s executor): ``shutdown()`` frees it."""

    def __init__(self, max_beam_width: int) -> None:
        self.max_beam_width = max_beam_width
        self.alive = True
        common.RECORDER.gpu.claim(self)

    def holds_gpu(self) -> bool:
        return self.alive

    def can_enqueue_requests(self) -> bool:
        return self.alive  # the leader (rank 0) process, until shut down

    def shutdown(self) -> None:
        if self.alive:  # a second call returns at once (Executor::Impl::shutdown at b35ac1b6)
            self.alive = False
            common.RECORDER.shutdowns += 1


class SamplingConfig:
    """``bindings.executor.SamplingConfig``: a line declares its parameters (``@takes``) and
    passes the bound values here; the executor reads ``beam_width``."""

    def __init__(self, a: Args) -> None:
        self.values = dict(a)
        self.beam_width: int = a["beam_width"]


class OutputConfig:
    """``bindings.executor.OutputConfig`` (``bindings.cpp`` l.211-214 at 04c5298; 0.16 adds
    ``return_perf_metrics``, ``executor.h`` @42a7b09): everything off by default."""

    def __init__(
        self,
        return_log_probs: bool = False,
        return_context_logits: bool = False,
        return_generation_logits: bool = False,
        exclude_input_from_output: bool = False,
        **_others: bool,
    ) -> None:
        self.exclude_input_from_output = exclude_input_from_output


class Request:
    """``bindings.executor.Request``: a line declares its parameters (``@takes``, the second is
    ``max_new_tokens`` or ``max_tokens``) and passes the bound values here."""

    def __init__(
        self, input_token_ids: Any, max_new: int, a: Args, sampling: Callable[[], SamplingConfig]
    ) -> None:
        if not isinstance(input_token_ids, list) or not all(isinstance(t, int) for t in input_token_ids):
            raise TypeError("Request(): incompatible constructor arguments (input_token_ids: List[int])")
        self.input_token_ids: list[int] = input_token_ids
        self.max_new = max_new
        self.streaming: bool = a["streaming"]
        self.sampling_config: SamplingConfig = a["sampling_config"] or sampling()
        self.output_config: OutputConfig = a["output_config"] or OutputConfig()
        self.end_id: int | None = a["end_id"]
        self.pad_id: int | None = a["pad_id"]


@dataclass
class Result:
    """``bindings.executor.Result``: the fields the harness reads."""

    is_final: bool
    output_token_ids: list[list[int]]


class Response:
    """``bindings.executor.Response``: an error or a result (``executor.h`` l.433-463 at 04c5298:
    reading the one it does not hold throws)."""

    def __init__(
        self, request_id: int, *, result: Result | None = None, error_msg: str | None = None
    ) -> None:
        self.request_id = request_id
        self._result, self._error = result, error_msg

    def has_error(self) -> bool:
        return self._error is not None

    @property
    def error_msg(self) -> str:
        if self._error is None:
            raise RuntimeError("TEST DOUBLE: getErrorMsg on a response without an error")
        return self._error

    @property
    def result(self) -> Result:
        if self._result is None:
            raise RuntimeError("TEST DOUBLE: getResult on a response with an error")
        return self._result


@dataclass(eq=False)
class _Flight:
    """One request from its enqueue to its last response."""

    id: int
    request: Request
    decoded: int = 0
    tokens: list[list[int]] = field(default_factory=list)  # each beam's whole output, once admitted

    def admit(self, max_seq_len: int) -> None:
        """Its outputs, ``max_new_tokens`` cut to what ``max_seq_len`` leaves (validate)."""
        r = self.request
        new = min(r.max_new, max_seq_len - len(r.input_token_ids))
        beams = r.sampling_config.beam_width
        self.tokens = [common.generated(r.input_token_ids, k, new, r.end_id, 0) for k in range(beams)]

    @property
    def done(self) -> bool:
        return self.decoded >= max(len(t) for t in self.tokens)

    def result(self) -> Result:
        prompt = [] if self.request.output_config.exclude_input_from_output else self.request.input_token_ids
        return Result(True, [prompt + beam[: self.decoded] for beam in self.tokens])


class InflightExecutor(Executor):
    """An Executor whose requests are decoded in flight (see the module docstring). A line sets
    ``PROMPT_PREFIX``, ``SHUTDOWN_ENQUEUE``, ``SHUTDOWN_AWAIT`` and ``beam_error``."""

    STEP_S = 0.002  # the decode loop's pause between steps (scaffolding)
    PROMPT_PREFIX = ""  # what the line's executor puts before the validation's message
    # where a line's source does not hold the executor's text (0.13's and 0.16's are closed)
    SHUTDOWN_ENQUEUE = (
        "TEST DOUBLE: enqueue_request after shutdown() (the executor's text is not in the source)"
    )
    SHUTDOWN_AWAIT = (
        "TEST DOUBLE: await_responses after shutdown() (the executor's text is not in the source)"
    )

    def __init__(self, limits: Limits) -> None:
        super().__init__(limits.max_beam_width)
        self.limits = limits
        self.cv = threading.Condition()
        self.queue: deque[_Flight] = deque()
        self.active: list[_Flight] = []
        self.ready: dict[int, list[Response]] = {}
        self.terminated: set[int] = set()
        self.cancelled: set[int] = set()
        self.steps: list[tuple[int, ...]] = []  # the request ids each decode step ran together
        self.held = False
        self.next_id = 0
        self.worker: threading.Thread | None = None

    def beam_error(self, beams: int) -> str | None:
        """The line's error response for a request of ``beams`` beams (None: it is served)."""
        raise NotImplementedError

    # -- the binding's calls ----------------------------------------------------------------

    def enqueue_request(self, request: Request) -> int:
        if not isinstance(request, Request):
            raise TypeError("enqueue_request(): incompatible function arguments")
        with self.cv:
            if not self.alive:
                raise RuntimeError(self.SHUTDOWN_ENQUEUE)
            self.next_id += 1
            self.queue.append(_Flight(self.next_id, request))
            common.RECORDER.calls.append(
                {
                    "runner": "Executor.enqueue_request",
                    "ids": list(request.input_token_ids),
                    "max_new_tokens": request.max_new,
                    "streaming": request.streaming,
                    "end_id": request.end_id,
                    "pad_id": request.pad_id,
                    "sampling": dict(request.sampling_config.values),
                }
            )
            self._wake()
            return self.next_id

    def await_responses(self, id: int, timeout: timedelta | None = None) -> list[Response]:
        if not isinstance(id, int) or not (timeout is None or isinstance(timeout, timedelta)):
            raise TypeError("await_responses(): incompatible function arguments")
        with self.cv:
            if not self.alive:
                raise RuntimeError(self.SHUTDOWN_AWAIT)
            if id in self.terminated:
                return [Response(id, error_msg=TERMINATED.format(id=id))]
            deadline = None if timeout is None else time.monotonic() + timeout.total_seconds()
            while self.alive and not self.ready.get(id):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return []
                self.cv.wait(left)
            if not self.alive:
                raise RuntimeError(self.SHUTDOWN_AWAIT)
            responses = self.ready.pop(id)
            if any(r.has_error() or r.result.is_final for r in responses):
                self.terminated.add(id)
            return responses

    def cancel_request(self, id: int) -> None:
        with self.cv:
            if not self.alive:
                raise RuntimeError(self.SHUTDOWN_AWAIT)
            self.cancelled.add(id)
            self.cv.notify_all()

    def shutdown(self) -> None:
        with self.cv:
            super().shutdown()
            self.cv.notify_all()
            worker = self.worker
        if worker is not None and worker is not threading.current_thread():
            worker.join()

    # -- scaffolding ------------------------------------------------------------------------

    def hold(self) -> None:
        """Keep the decode loop from stepping (requests enqueued meanwhile wait together)."""
        with self.cv:
            self.held = True

    def release(self) -> None:
        with self.cv:
            self.held = False
            self.cv.notify_all()

    def running(self) -> int:
        """Requests enqueued whose last response was not read."""
        with self.cv:
            return self.next_id - len(self.terminated)

    # -- the decode loop ----------------------------------------------------------------------

    def _wake(self) -> None:
        """(With ``cv`` held.) Start the decode loop if it is not running."""
        self.cv.notify_all()
        if self.worker is None:
            self.worker = threading.Thread(target=self._run, name="executor-double", daemon=True)
            self.worker.start()

    def _run(self) -> None:
        while True:
            with self.cv:
                while self.alive and self.held:
                    self.cv.wait()
                if not self.alive or not (self.queue or self.active):
                    self.worker = None  # ends; the next enqueue starts another
                    return
                self._step()
            time.sleep(self.STEP_S)

    def _step(self) -> None:
        """(With ``cv`` held.) Admit what fits, then one token for every active request."""
        while self.queue and len(self.active) < self.limits.max_batch_size:
            flight = self.queue.popleft()
            error = self._fetch_error(flight.request)
            if error is not None:
                self.ready.setdefault(flight.id, []).append(Response(flight.id, error_msg=error))
                continue
            flight.admit(self.limits.max_seq_len)
            self.active.append(flight)
        if self.active:
            self.steps.append(tuple(f.id for f in self.active))
        for flight in list(self.active):
            flight.decoded += 1
            if flight.done or flight.id in self.cancelled:
                self.active.remove(flight)
                self.ready.setdefault(flight.id, []).append(Response(flight.id, result=flight.result()))
        self.cv.notify_all()

    def _fetch_error(self, request: Request) -> str | None:
        """The validation's refusal, then the line's beam-width rule."""
        prompt = len(request.input_token_ids)
        if prompt > self.limits.max_input_len:
            return self.PROMPT_PREFIX + TOO_LONG.format(prompt=prompt, limit=self.limits.max_input_len)
        return self.beam_error(request.sampling_config.beam_width)


def bindings_modules(
    executor: type[InflightExecutor], request: type[Request], sampling: type[SamplingConfig]
) -> dict[str, dict[str, Any] | None]:
    """The ``tensorrt_llm.bindings.executor`` module of a line (for ``common.install_line``)."""
    return {
        "tensorrt_llm.bindings": {"__path__": []},
        "tensorrt_llm.bindings.executor": {
            "Executor": executor,
            "Request": request,
            "SamplingConfig": sampling,
            "OutputConfig": OutputConfig,
            "Response": Response,
            "Result": Result,
        },
    }
