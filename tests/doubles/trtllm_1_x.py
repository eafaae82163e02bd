"""TEST DOUBLE of ``tensorrt_llm`` of the 1.x line: it is NOT TensorRT-LLM and runs no model.

It reports ``__version__ = "1.0.0"``. The index stores none of the files below at the v1.0.0
release commit (ae8270b, from tensorrtllm_backend's submodule pointer); they were read from
the 1.x-series versions it does store (the index does not name their commits), plus the 1.0
documentation. Where a later 1.x file is the source, that is said:

- ``tensorrt_llm/_tensorrt_engine/__init__.py``: ``from tensorrt_llm.llmapi.llm import _TrtLLM
  as LLM`` (TensorRT engines); plain ``tensorrt_llm.LLM`` is the PyTorch backend.
- ``tensorrt_llm/llmapi/llm.py`` (``BaseLLM``/``_TrtLLM``): every keyword must be a field of the
  backend's args class, else ValueError "{class} got invalid argument: {key}";
  ``_check_arguments`` returns early on the PyTorch backend; on TensorRT engines it raises
  ValueError "sampling_params.n (W) cannot exceed max_beam_width (M) when use_beam_search is
  True" when ``n == best_of``, else "sampling_params.best_of (W) cannot exceed ..."; the
  ``max_seq_len`` check reads "The sum of prompt length (P) and query length (0) max_tokens (T)
  should not exceed max_seq_len (M)"; public ``shutdown()`` (no ``_shutdown``).
- ``_torch/pyexecutor`` (``py_executor.py`` ``_validate_request`` / the request queue): a
  request whose beam width differs from ``max_beam_width`` is refused: "Request beam width X is
  not equal to max_beam_width Y. This is not supported!"; ``tests/unittest/_torch/sampler/
  test_beam_search.py`` ``test_smaller_beam_width`` expects it from ``LLM.generate`` as
  ``tensorrt_llm.executor.utils.RequestError`` (a RuntimeError subclass here: inferred).
- ``docs/source/1.0/features/sampling.md``: PyTorch-backend beam search needs
  ``use_beam_search=True``, ``max_beam_width`` equal to ``best_of``,
  ``disable_overlap_scheduler=True`` and ``cuda_graph_config=None``. What the real backend does
  when the last two are missing is not recorded: the double refuses at construction with a
  text marked "TEST DOUBLE".
- ``tensorrt_llm/llmapi/llm.py`` @4c05a74 (a later 1.x version, ``BaseLLM``): ``generate_async(
  inputs, sampling_params=None, lora_request=None, prompt_adapter_request=None, streaming=False,
  kv_cache_retention_config=None, disaggregated_params=None, _postproc_params=None,
  scheduling_params=None, cache_salt=None)`` returns the ``RequestOutput``
  (``RequestOutput._from_generation_result`` copies the ``GenerationResult``'s fields); ``generate``
  calls it per prompt, then ``result()`` on each. ``executor/result.py`` @a678b91 (a later 1.x
  version): ``GenerationResultBase.__init__`` sets ``self.cached_tokens = 0`` and
  ``_handle_response`` ``self.cached_tokens = getattr(response_result, 'cached_tokens', 0)``, so the
  RequestOutput says how many prompt tokens came from reused blocks; how many the executor
  counts is not modelled: the double says the prompt less its last token for a prompt this LLM
  has served before with block reuse on, 0 otherwise (TEST DOUBLE figure);
  ``GenerationResult.abort()`` aborts the request, ``finished`` says it is done,
  ``result(timeout=None)`` returns the result once done.
- ``tensorrt_llm/sampling_params.py`` (a later 1.x version, with the range validators 1.2 added):
  ``@dataclass(slots=True, kw_only=True)``; ``best_of`` defaults to ``n``; ValueError "best_of (X)
  cannot be less than n (Y)"; greedy (no beam search and top_k 1, top_p 0, temperature 0 or
  none set) with ``best_of > 1`` refused unless ``TLLM_ALLOW_N_GREEDY_DECODING``; no
  ``beam_width`` attribute.
- ``runtime/model_runner_cpp.py`` (a 1.x version: ``accepted_parameters`` adds ``min_p`` and
  ``beam_width_array``), output ``[batch, num_sequences, max_seq_len]``; the executor accepts a
  beam width below its maximum (trtllm-facts §2, ``verifyRequests``/``changeBeamWidth``). The
  ``from_dir``/``generate`` signatures were not read in a 1.x version: the 0.16 ones are
  assumed (the only code this double takes from another line's module, and marked so).
- ``runtime/model_runner.py`` (a 1.x version): ``from_engine(engine, *, max_output_len, ...)``
  keyword-only; ``from_dir(engine_dir, *, ...)`` likewise (trtllm-facts §2).
- The in-flight path (``tests/doubles/trtllm_executor.py`` has what the lines share), from 1.x
  sources only: ``ModelRunnerCpp.generate`` @03832911 builds one ``trtllm.Request(
  input_token_ids=..., max_tokens=max_new_tokens, pad_id=..., end_id=..., sampling_config=...,
  streaming=..., output_config=..., ..., language_adapter_uid=...)`` per prompt,
  ``self.executor.enqueue_requests``, then ``self.executor.await_responses()`` until every id's
  response is final, and ``RuntimeError(response.error_msg)`` for an error response; its
  SamplingConfig comes from ``accepted_parameters`` (``min_p``, ``beam_width_array`` added) with
  ``rename_params = {"num_beams": "beam_width", "random_seed": "seed"}``. The executor
  (``cpp/tensorrt_llm/executor/executorImpl.cpp`` at 1.2.0rc2 = b35ac1b6): ``enqueueRequests``
  first ``TLLM_CHECK_WITH_INFO(!mShutdownCalled, "Shutdown called, cannot enqueue requests")``
  (and refuses past a configured ``maxQueueSize``, not set by ``ModelRunnerCpp``),
  ``awaitResponses(IdType, timeout)`` ``TLLM_CHECK_WITH_INFO(!mShutdownCalled, "Shutdown
  called")``, a terminated id's error response, ``wait_for`` the timeout; ``fetchNewRequests``
  validates each request (``LlmRequest::validate``, ``batch_manager/llmRequest.cpp`` in a 1.x
  version) and turns what it throws into the request's error response "Encountered an error when
  fetching new request: " + the message; ``TrtGptModelInflightBatching::verifyRequests`` then
  ``changeBeamWidth`` (``trtGptModelInflightBatching.cpp`` at b35ac1b6) check "Requested beam
  width W is larger than configured max beam width M" (``TLLM_CHECK_WITH_INFO``: "[TensorRT-LLM]
  [ERROR] Assertion failed: " before it), which ``forwardAsync`` turns into "Encountered an error
  in forwardAsync function: " + the message for every active request (``terminateActiveRequests``;
  the double answers the wide request, the only kind the harness's paths send together); a
  smaller width is served once no other width is in flight (``getLeaderNewReqWithIds`` keeps a
  request of another width queued: not modelled, the harness sends one width per path). The
  ``Request`` parameters: the first seven as the 1.x ``executor.h`` declares them
  (``inputTokenIds, maxTokens, streaming, samplingConfig, outputConfig, endId, padId``), then the
  keywords ``ModelRunnerCpp`` passes (their order is not read: keyword-only here).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from tests.doubles import trtllm_0_15 as line_0_15
from tests.doubles import trtllm_common as common
from tests.doubles import trtllm_executor
from tests.doubles import trtllm_llmapi as llm_api
from tests.doubles.signatures import Args, takes

VERSION = "1.0.0"
LINE = "1.x"
DEFAULT_CUDA_GRAPHS = object()  # CudaGraphConfig() by default; None disables CUDA graphs


class RequestError(RuntimeError):
    """Double of tensorrt_llm.executor.utils.RequestError."""


@dataclass
class RequestOutput(llm_api.RequestOutput):
    """Double of the 1.x RequestOutput: also the prompt tokens served from reused KV blocks."""

    cached_tokens: int = 0


class PendingOutput(llm_api.PendingOutput):
    """Double of the 1.x GenerationResult while it is answered: ``abort()`` too."""

    aborted = False

    def abort(self) -> None:
        self.aborted = True
        self._answer = None


class SamplingConfig(trtllm_executor.SamplingConfig):
    """Double of bindings.executor.SamplingConfig 1.x: the names ``ModelRunnerCpp.generate``
    @03832911 passes it (its ``accepted_parameters``, renamed)."""

    @takes("""beam_width=1, top_k=None, top_p=None, top_p_min=None, top_p_reset_ids=None, top_p_decay=None,
        seed=None, temperature=None, min_tokens=None, beam_search_diversity_rate=None, repetition_penalty=None,
        presence_penalty=None, frequency_penalty=None, length_penalty=None, early_stopping=None,
        no_repeat_ngram_size=None, num_return_sequences=None, min_p=None, beam_width_array=None""")
    def __init__(self, a: Args) -> None:
        super().__init__(a)


class Request(trtllm_executor.Request):
    """Double of bindings.executor.Request 1.x (``max_tokens``; see the module docstring)."""

    @takes("""input_token_ids, max_tokens, streaming=False, sampling_config=None, output_config=None,
        end_id=None, pad_id=None, *, position_ids=None, bad_words=None, stop_words=None,
        external_draft_tokens_config=None, prompt_tuning_config=None, mrope_config=None, lora_config=None,
        lookahead_config=None, logits_post_processor_name=None, encoder_input_token_ids=None,
        return_all_generated_tokens=False, encoder_input_features=None, encoder_output_length=None,
        cross_attention_mask=None, skip_cross_attn_blocks=None, language_adapter_uid=None""")
    def __init__(self, a: Args) -> None:
        super().__init__(a["input_token_ids"], a["max_tokens"], a, SamplingConfig)


class Executor(trtllm_executor.InflightExecutor):
    """Double of bindings.executor.Executor 1.x (``executorImpl.cpp`` at b35ac1b6; see the module
    docstring)."""

    PROMPT_PREFIX = "Encountered an error when fetching new request: "
    SHUTDOWN_ENQUEUE = "[TensorRT-LLM][ERROR] Assertion failed: Shutdown called, cannot enqueue requests"
    SHUTDOWN_AWAIT = "[TensorRT-LLM][ERROR] Assertion failed: Shutdown called"

    def beam_error(self, beams: int) -> str | None:
        if beams <= self.max_beam_width:
            return None
        return (
            "Encountered an error in forwardAsync function: [TensorRT-LLM][ERROR] Assertion failed: "
            f"Requested beam width {beams} is larger than configured max beam width {self.max_beam_width}"
        )


class ModelRunnerCpp(line_0_15.ModelRunnerCpp):
    """Double of the 1.x ModelRunnerCpp: the 0.16 interface, more accepted sampling keywords,
    the Executor kept as ``self.executor`` (``model_runner_cpp.py`` l.77 @03832911, counted by
    hand; ``.session`` before), with 1.x's own Executor."""

    ACCEPTED = line_0_15.CPP_ACCEPTED | {"min_p", "beam_width_array"}
    EXECUTOR_ATTR = "executor"
    EXECUTOR = Executor


class ModelRunner(line_0_15.ModelRunner):
    """Double of the 1.x ModelRunner (keyword-only from_dir)."""


@dataclass(slots=True, kw_only=True)
class SamplingParams(llm_api.OpenAiSampling):
    """Double of the 1.x SamplingParams (OpenAI-style n/best_of/use_beam_search only)."""

    top_k: int | None = None
    top_p: float | None = None
    temperature: float | None = None
    length_penalty: float | None = None
    early_stopping: int | None = None
    detokenize: bool = True

    def __post_init__(self) -> None:
        self._pad_as_end()
        self.best_of = best_of = self.best_of or self.n
        if best_of < self.n:
            raise ValueError(f"best_of ({best_of}) cannot be less than n ({self.n})")
        self._refuse_greedy_best_of(self._greedy_decoding)

    @property
    def _greedy_decoding(self) -> bool:
        implied = (
            (self.temperature is None and self.top_p is None and self.top_k is None)
            or self.top_k == 1
            or self.top_p == 0.0
            or self.temperature == 0
        )
        return not self.use_beam_search and implied


@dataclass(kw_only=True)
class KvCacheConfig:
    """Double of ``tensorrt_llm.llmapi.KvCacheConfig`` 1.x (``llmapi/llm_args.py``, a pydantic
    model mirroring the executor's): ``enable_block_reuse: bool = Field(default=True, ...)``
    in every stored 1.x ``llm_args.py``; the 1.3/1.4 API docs show the same default."""

    enable_block_reuse: bool = True
    free_gpu_memory_fraction: float | None = None


@dataclass(kw_only=True)
class _CommonArgs(llm_api.LlmArgsBase):
    max_beam_width: int | None = None
    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    max_seq_len: int | None = None
    kv_cache_config: Any = None
    enable_chunked_prefill: bool = False


@dataclass(kw_only=True)
class TorchLlmArgs(_CommonArgs):
    disable_overlap_scheduler: bool = False
    cuda_graph_config: Any = DEFAULT_CUDA_GRAPHS


@dataclass(kw_only=True)
class TrtLlmArgs(_CommonArgs):
    build_config: llm_api.BuildConfig | None = None


_A = TypeVar("_A", bound=_CommonArgs)


class _BaseLLM(llm_api.LlmApi[SamplingParams], Generic[_A]):
    ARGS: type[_A]
    BACKEND = "pytorch"
    SAMPLING_PARAMS = SamplingParams
    KV_CACHE_CONFIG = KvCacheConfig
    PENDING = PendingOutput

    @takes("""model, tokenizer=None, tokenizer_mode='auto', skip_tokenizer_init=False, trust_remote_code=False,
        tensor_parallel_size=1, dtype='auto', revision=None, tokenizer_revision=None, **kwargs""")
    def __init__(self, a: Args) -> None:
        kwargs: dict[str, Any] = a["kwargs"]
        valid = {f.name for f in fields(self.ARGS)} | {"backend"}
        for key in kwargs:
            if key not in valid:
                raise ValueError(f"{self.__class__.__name__} got invalid argument: {key}")
        kwargs.pop("backend", None)
        self.args = self.ARGS(**llm_api.named_args_of(a), **kwargs)
        self._setup()
        assert self.args.max_beam_width is not None  # set by _setup
        self._start(
            f"{type(self).__module__}.{type(self).__qualname__}", self.args, kwargs, self.args.max_beam_width
        )

    def _setup(self) -> None:
        if self.args.max_beam_width is None:
            self.args.max_beam_width = 1

    @takes("""inputs, sampling_params=None, use_tqdm=True, lora_request=None, prompt_adapter_request=None,
        kv_cache_retention_config=None, disaggregated_params=None, scheduling_params=None, cache_salt=None""")
    def generate(self, a: Args) -> Any:
        return self._generate(a["inputs"], a["sampling_params"], a["use_tqdm"])

    @takes("""inputs, sampling_params=None, lora_request=None, prompt_adapter_request=None, streaming=False,
        kv_cache_retention_config=None, disaggregated_params=None, _postproc_params=None, scheduling_params=None,
        cache_salt=None""")
    def generate_async(self, a: Args) -> llm_api.PendingOutput:
        return self._generate_async(a["inputs"], a["sampling_params"], a["streaming"])

    def _output(
        self, request_id: int, prompt: str, ids: list[int], outputs: list[llm_api.CompletionOutput]
    ) -> RequestOutput:
        seen: set[tuple[int, ...]] = self.__dict__.setdefault("seen", set())
        cached = len(ids) - 1 if self.block_reuse and tuple(ids) in seen else 0
        seen.add(tuple(ids))
        return RequestOutput(request_id, prompt, ids, outputs, cached_tokens=cached)

    def _running(self) -> trtllm_executor.Executor:
        if self._executor is None:
            raise RuntimeError("the LLM was shut down")
        return self._executor

    def _check_arguments(self, prompt_len: int, sp: SamplingParams) -> None:
        return  # the PyTorch backend leaves the request checks to its executor

    def _verify_request(self, executor: trtllm_executor.Executor, width: int) -> None:
        if width != self.args.max_beam_width:
            raise RequestError(
                f"Request beam width {width} is not equal to max_beam_width "
                f"{self.args.max_beam_width}. This is not supported!"
            )

    def shutdown(self) -> None:
        self._stop()


class LLM(_BaseLLM[TorchLlmArgs]):
    """Double of tensorrt_llm.LLM 1.x: the PyTorch backend."""

    ARGS = TorchLlmArgs

    def _setup(self) -> None:
        super()._setup()
        a = self.args
        cuda_graphs = getattr(a, "cuda_graph_config", None)  # a field of some releases only
        assert a.max_beam_width is not None  # set by super()._setup()
        if a.max_beam_width > 1 and (not a.disable_overlap_scheduler or cuda_graphs is not None):
            raise ValueError(
                "TEST DOUBLE: beam search on the PyTorch backend needs "
                "disable_overlap_scheduler=True and cuda_graph_config=None "
                "(docs/source/1.0/features/sampling.md); the real failure is not recorded"
            )


class _TrtLLM(_BaseLLM[TrtLlmArgs]):
    """Double of tensorrt_llm._tensorrt_engine.LLM 1.x (TensorRT engines)."""

    ARGS = TrtLlmArgs
    BACKEND = "tensorrt"

    def _setup(self) -> None:
        build = common.engine_config(self.args.model).get("build_config") or {}
        self.args.build_config = llm_api.BuildConfig.of(build)
        self.args.max_beam_width = self.args.build_config.max_beam_width

    def _check_arguments(self, prompt_len: int, sp: SamplingParams) -> None:
        build = self.args.build_config
        assert build is not None and build.max_seq_len is not None  # read from the engine by _setup
        limit, seq = build.max_beam_width, build.max_seq_len
        if not self.args.enable_chunked_prefill and prompt_len + (sp.max_tokens or 0) > seq:
            raise ValueError(
                f"The sum of prompt length ({prompt_len}) and query length (0) max_tokens "
                f"({sp.max_tokens}) should not exceed max_seq_len ({seq})"
            )
        best_of = sp.best_of
        assert best_of is not None  # set to n by SamplingParams
        if sp.use_beam_search and best_of > limit:
            which = f"n ({sp.n})" if sp.n == best_of else f"best_of ({best_of})"
            raise ValueError(
                f"sampling_params.{which} cannot exceed max_beam_width ({limit}) when use_beam_search is True"
            )

    def _verify_request(self, executor: trtllm_executor.Executor, width: int) -> None:
        return  # the C++ executor of 1.x accepts a beam width up to its maximum


LLM.__module__ = _TrtLLM.__module__ = "tensorrt_llm.llmapi.llm"  # where 1.x defines both


def install(monkeypatch: pytest.MonkeyPatch) -> common.Recorder:
    """Put this double into sys.modules as ``tensorrt_llm`` 1.0.0."""
    package = {"LLM": LLM, "SamplingParams": SamplingParams, "BuildConfig": llm_api.BuildConfig}
    modules = llm_api.line_modules(ModelRunner, ModelRunnerCpp, LLM, SamplingParams, KvCacheConfig)
    # 1.x runs TensorRT engines through _tensorrt_engine.LLM; a refused request raises RequestError
    engines: dict[str, dict[str, Any] | None] = {
        "tensorrt_llm._tensorrt_engine": {"LLM": _TrtLLM},
        "tensorrt_llm.executor": {"__path__": []},
        "tensorrt_llm.executor.utils": {"RequestError": RequestError},
        **trtllm_executor.bindings_modules(Executor, Request, SamplingConfig),
    }
    return common.install_line(
        monkeypatch, VERSION, "tests/doubles/trtllm_1_x.py", {"tensorrt_llm": package, **modules, **engines}
    )


def make_engine_dir(path: Path, **kwargs: Any) -> Path:
    """A unified engine directory whose config.json says 1.0.0 (the 0.13 sample, version set)."""
    return common.make_engine_dir(path, version=VERSION, **kwargs)
