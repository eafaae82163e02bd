"""What the per-release TEST DOUBLES of ``tensorrt_llm`` share in the LLM API (0.15/0.16 and
1.x). None of this is TensorRT-LLM; each line's own module says where its behaviour was read
from, and sets what differs by line.

Shared because it is identical in the source of both lines:

- ``RequestOutput.outputs[k].index/.text/.token_ids`` (``llmapi/llm.py`` @v0.16.0 and the 1.x
  ``llm.py``);
- ``LLM`` (``llmapi/llm.py``): the args built from the keywords, the tokenizer, a batch of
  prompts in position order, one request per prompt (``LlmApi``); ``generate`` is a loop over
  ``generate_async``, one call per prompt, then ``result()`` on each (l.209-234 @42a7b09;
  ``BaseLLM.generate`` in 1.x @4c05a74), and ``generate_async`` checks the request at once
  (``_prepare_sampling_params``, ``_check_arguments``, l.266-280 @42a7b09) and returns the
  request's ``RequestOutput``, a ``GenerationResult`` whose ``result()`` blocks until the
  executor has answered and returns it (``executor/result.py`` ``GenerationResult.result``, read
  at later versions: the 0.16 ``executor`` module is not stored); the parameters both lines'
  args classes take first (``LlmArgsBase``); the OpenAI-style fields of ``SamplingParams``
  and the rules both lines apply to them (``OpenAiSampling``); ``BuildConfig``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Generic, Protocol, TypeVar

from tests.doubles import trtllm_common as common
from tests.doubles.signatures import Args
from tests.doubles.trtllm_executor import Executor


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]


@dataclass
class RequestOutput:
    request_id: int
    prompt: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True


class PendingOutput:
    """Double of what ``generate_async`` returns: a request the executor is answering. The real
    one is the RequestOutput itself, filled as responses arrive; ``result(timeout=None)`` waits
    for the last and returns it. Here the answer is made when first read (the executor's own
    refusal of the request, ``_verify_request``, is raised then, as a response error would be)."""

    def __init__(self, answer: Callable[[], RequestOutput]) -> None:
        self._answer: Callable[[], RequestOutput] | None = answer
        self._output: RequestOutput | None = None

    def result(self, timeout: float | None = None) -> RequestOutput:
        if self._output is None:
            if self._answer is None:
                raise RuntimeError("TEST DOUBLE: the request was aborted")
            answer, self._answer = self._answer, None
            self._output = answer()
        return self._output

    @property
    def finished(self) -> bool:
        return self._output is not None


def hf_tokenizer(folder: str, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)


@dataclass(kw_only=True)
class BuildConfig:
    """Double of tensorrt_llm.BuildConfig (the fields the LLM API reads here)."""

    max_input_len: int = 1024
    max_seq_len: int | None = None
    max_batch_size: int = 2048
    max_beam_width: int = 1
    max_num_tokens: int = 8192

    @classmethod
    def of(cls, build: dict[str, Any]) -> BuildConfig:
        """From an engine's ``build_config``, the fields modelled here."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in build.items() if k in names})


@dataclass(kw_only=True)
class LlmArgsBase:
    """The parameters of ``LLM.__init__`` that both lines' args classes take first."""

    model: str
    tokenizer: Any = None
    tokenizer_mode: str = "auto"
    skip_tokenizer_init: bool = False
    trust_remote_code: bool = False
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    revision: str | None = None
    tokenizer_revision: str | None = None


@dataclass(slots=True, kw_only=True)
class OpenAiSampling:
    """The OpenAI-style beam fields of ``SamplingParams`` (``sampling_params.py``), first in both
    lines' classes, and the rules both lines apply to them."""

    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    n: int = 1
    best_of: int | None = None
    use_beam_search: bool = False

    def _pad_as_end(self) -> None:
        if self.pad_id is None:
            self.pad_id = self.end_id

    def _refuse_greedy_best_of(self, greedy: bool) -> None:
        """Greedy decoding with ``best_of > 1``: refused unless TLLM_ALLOW_N_GREEDY_DECODING."""
        best_of = self.best_of
        assert best_of is not None  # set to n by __post_init__
        if best_of > 1 and greedy and not os.environ.get("TLLM_ALLOW_N_GREEDY_DECODING"):
            raise ValueError(
                f"Greedy decoding in the LLM API does not allow multiple returns. Please "
                f"set to best_of=1, got best_of={best_of}. Please set to best_of=1 or "
                "set an environment variable TLLM_ALLOW_N_GREEDY_DECODING=1 to allow "
                "best_of > 1 under the greedy decoding."
            )

    def executor_beam_width(self) -> int:
        """``_get_sampling_config``: beam_width = best_of with beam search, else 1."""
        assert self.best_of is not None  # set to n by __post_init__
        return self.best_of if self.use_beam_search else 1


_P = TypeVar("_P", bound=OpenAiSampling)


class _Args(Protocol):
    model: str
    tokenizer: Any
    trust_remote_code: bool
    kv_cache_config: Any


def named_args(
    model: str, tokenizer: Any, trust_remote_code: bool, tokenizer_mode: str, dtype: str
) -> dict[str, Any]:
    """The keywords ``LLM.__init__`` passes by name to its args class (the rest are its **kwargs)."""
    return {
        "model": model,
        "tokenizer": tokenizer,
        "trust_remote_code": trust_remote_code,
        "tokenizer_mode": tokenizer_mode,
        "dtype": dtype,
    }


def line_modules(
    model_runner: type, model_runner_cpp: type, llm: type, sampling_params: type, kv_cache_config: type
) -> dict[str, dict[str, Any] | None]:
    """The modules both lines install alike: ``tensorrt_llm.runtime``'s runners and the
    ``tensorrt_llm.llmapi`` package (for ``common.install_line``)."""
    return {
        "tensorrt_llm.runtime": {"ModelRunner": model_runner, "ModelRunnerCpp": model_runner_cpp},
        "tensorrt_llm.llmapi": {
            "__path__": [],
            "LLM": llm,
            "SamplingParams": sampling_params,
            "KvCacheConfig": kv_cache_config,
        },
    }


def named_args_of(a: Args) -> dict[str, Any]:
    """``named_args`` from ``LLM.__init__``'s bound arguments (``signatures.takes``)."""
    return named_args(a["model"], a["tokenizer"], a["trust_remote_code"], a["tokenizer_mode"], a["dtype"])


class LlmApi(Generic[_P]):
    """What the LLM API's ``LLM`` does the same way on 0.15/0.16 and 1.x (``llmapi/llm.py``):
    after the line's own setup, the tokenizer, the load recorded (with the block reuse of the
    given KvCacheConfig, else of the line's default one), the executor started; ``generate``
    takes a prompt or a list and answers in position order, each prompt one request: TypeError
    unless the line's SamplingParams, then the line's checks. A line sets ``SAMPLING_PARAMS``,
    ``KV_CACHE_CONFIG``, ``_running``, ``_check_arguments`` and ``_verify_request``."""

    SAMPLING_PARAMS: type[_P]
    KV_CACHE_CONFIG: type
    PENDING: type[PendingOutput] = PendingOutput

    def _start(self, runner: str, args: _Args, kwargs: dict[str, Any], max_beam_width: int) -> None:
        """After the args (``named_args`` and ``kwargs``) and the line's setup."""
        self.tokenizer = hf_tokenizer(str(args.tokenizer or args.model), args.trust_remote_code)
        common.record_load(
            runner,
            model=args.model,
            tokenizer=args.tokenizer,
            trust_remote_code=args.trust_remote_code,
            block_reuse=bool((args.kv_cache_config or self.KV_CACHE_CONFIG()).enable_block_reuse),
            **kwargs,
        )
        self._executor: Executor | None = Executor(max_beam_width)
        self._next_id = 0
        self.block_reuse = bool((args.kv_cache_config or self.KV_CACHE_CONFIG()).enable_block_reuse)
        self.unread: list[PendingOutput] = []

    def _generate(self, inputs: Any, sampling_params: Any, use_tqdm: bool) -> Any:
        batch = inputs if isinstance(inputs, list) else [inputs]
        common.RECORDER.calls.append(
            {
                "runner": "LLM",
                "prompts": list(batch),
                "sampling_params": sampling_params,
                "use_tqdm": use_tqdm,
            }
        )
        futures = [self._submit(prompt, sampling_params, i) for i, prompt in enumerate(batch)]
        outs = [future.result() for future in futures]
        return outs if isinstance(inputs, list) else outs[0]

    def _generate_async(self, prompt: Any, sampling_params: Any, streaming: bool) -> PendingOutput:
        """One request sent now (``generate_async``); recorded, and kept as unread until read."""
        common.RECORDER.calls.append(
            {"runner": "LLM.generate_async", "prompts": [prompt], "sampling_params": sampling_params}
        )
        if streaming:
            raise NotImplementedError("TEST DOUBLE: streaming is not modelled")
        future = self._submit(prompt, sampling_params, 0)  # a request alone: position 0
        self.unread.append(future)
        return future

    def _submit(self, prompt: str, sp: object, position: int) -> PendingOutput:
        if not isinstance(sp, self.SAMPLING_PARAMS):
            raise TypeError(f"The sampling_params must be type SamplingParams or None, but got {type(sp)}")
        executor = self._running()
        ids: list[int] = self.tokenizer(prompt)["input_ids"]
        self._check_arguments(len(ids), sp)
        self._next_id += 1
        request_id = self._next_id

        def answer() -> RequestOutput:
            self._verify_request(executor, sp.executor_beam_width())
            outputs = []
            for k in range(sp.n):
                gen = [t for t in common.generated(ids, k, sp.max_tokens, sp.end_id, position) if t >= 0]
                text = self.tokenizer.decode(gen, skip_special_tokens=True)
                outputs.append(CompletionOutput(index=k, text=text, token_ids=gen))
            return self._output(request_id, prompt, ids, outputs)

        return self.PENDING(answer)

    def _output(
        self, request_id: int, prompt: str, ids: list[int], outputs: list[CompletionOutput]
    ) -> RequestOutput:
        """The request's RequestOutput (a line adds what its own says)."""
        return RequestOutput(request_id=request_id, prompt=prompt, prompt_token_ids=ids, outputs=outputs)

    @property
    def running_requests(self) -> int:
        """Requests sent with generate_async and neither read nor aborted."""
        self.unread = [f for f in self.unread if not f.finished and not getattr(f, "aborted", False)]
        return len(self.unread)

    def _running(self) -> Executor:
        """The executor; RuntimeError once the LLM is shut down."""
        raise NotImplementedError

    def _check_arguments(self, prompt_len: int, sp: _P) -> None:
        """The LLM's checks of a request (ValueError)."""

    def _verify_request(self, executor: Executor, width: int) -> None:
        """The executor's check of a request's beam width."""

    def _stop(self) -> None:
        """What ``shutdown()`` (1.x) or ``_shutdown()`` (0.15/0.16) does."""
        executor: Executor | None = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown()
            self._executor = None
