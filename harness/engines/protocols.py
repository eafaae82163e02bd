"""What the backends call on the libraries they drive, named as small protocols.

transformers tokenizers and the TensorRT-LLM runners and LLMs are large objects whose types
either are not published (``tensorrt_llm``) or are wider than the harness's use of them
(transformers annotates ``decode`` for batches too, ``str | list[str]``). Each protocol here
names exactly the methods and attributes a backend uses, so that what a release must offer is
written down and checked where it is called. Nothing here imports those libraries:
``tensorrt_llm`` is imported only when an engine is constructed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Protocol

__all__ = [
    "AsyncLlm",
    "CompletionOutput",
    "Executor",
    "ExecutorResponse",
    "ExecutorResult",
    "Llm",
    "LlmClass",
    "RequestFuture",
    "RequestOutput",
    "Runner",
    "RunnerClass",
    "Tokenizer",
]


class Tokenizer(Protocol):
    """A transformers tokenizer (``AutoTokenizer.from_pretrained``): texts to token ids and
    back, and its special ids."""

    @property
    def eos_token_id(self) -> int | None: ...

    @property
    def pad_token_id(self) -> int | None: ...

    def __call__(self, text: list[str], /) -> Mapping[str, list[list[int]]]: ...

    def decode(self, token_ids: list[int], /, *, skip_special_tokens: bool) -> str: ...

    def __len__(self) -> int: ...


class Runner(Protocol):
    """A ``tensorrt_llm.runtime`` runner (``ModelRunnerCpp``, ``ModelRunner``): one
    ``generate`` call per batch; what it returns is checked where it is read."""

    def generate(self, **kwargs: object) -> object: ...


class RunnerClass(Protocol):
    """A runner class: loaded from an engine directory with keyword arguments."""

    def from_dir(self, **kwargs: object) -> Runner: ...


class CompletionOutput(Protocol):
    """One beam of an LLM API request's answer (``tensorrt_llm``'s ``CompletionOutput``)."""

    text: str | None
    token_ids: Sequence[int]


class RequestOutput(Protocol):
    """One request's answer from ``LLM.generate``: its beams (each may carry an ``index``)."""

    outputs: Sequence[CompletionOutput]


class Llm(Protocol):
    """A ``tensorrt_llm.LLM``: one ``generate`` call per batch, prompts in position order."""

    def generate(
        self, prompts: list[str], sampling_params: object, /, **kwargs: object
    ) -> list[RequestOutput] | RequestOutput: ...


class RequestFuture(Protocol):
    """What ``LLM.generate_async`` returns: the request's RequestOutput while the executor fills
    it (a ``GenerationResult``); ``result()`` blocks until it is done and returns it."""

    def result(self) -> RequestOutput: ...


class AsyncLlm(Protocol):
    """A ``tensorrt_llm.LLM`` with ``generate_async``: one prompt per call, sent at once."""

    def generate_async(self, inputs: str, /, *, sampling_params: object) -> RequestFuture: ...


class LlmClass(Protocol):
    """The LLM class itself: constructed with keyword arguments; its ``generate`` is inspected
    for the keywords it takes, and its module and name go into the report."""

    __module__: str
    __qualname__: str

    def __call__(self, **kwargs: object) -> Llm: ...

    @property
    def generate(self) -> Callable[..., object]: ...


class ExecutorResult(Protocol):
    """A ``tensorrt_llm.bindings.executor.Result``: whether it is the request's last, and each
    beam's token ids (the prompt's included unless the request's OutputConfig excludes them)."""

    @property
    def is_final(self) -> bool: ...

    @property
    def output_token_ids(self) -> Sequence[Sequence[int]]: ...


class ExecutorResponse(Protocol):
    """A ``tensorrt_llm.bindings.executor.Response``: an error or a result for one request."""

    def has_error(self) -> bool: ...

    @property
    def error_msg(self) -> str: ...

    @property
    def result(self) -> ExecutorResult: ...


class Executor(Protocol):
    """The ``tensorrt_llm.bindings.executor.Executor`` a ``ModelRunnerCpp`` holds (0.10 on): one
    request enqueued per call, its responses awaited by its id (``harness.engines.trtllm_inflight``)."""

    def enqueue_request(self, request: object, /) -> int: ...

    def await_responses(self, request_id: int, timeout: timedelta, /) -> Sequence[ExecutorResponse]: ...

    def cancel_request(self, request_id: int, /) -> None: ...

    def can_enqueue_requests(self) -> bool: ...
