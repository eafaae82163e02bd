"""TEST DOUBLE of ``tensorrt_llm`` of the 0.15-0.16 line: it is NOT TensorRT-LLM and runs no model.

It reports ``__version__ = "0.16.0"``. Read from NVIDIA/TensorRT-LLM at the release commits
(from the submodule pointers of triton-inference-server/tensorrtllm_backend: v0.15.0 = 8f91cff,
v0.16.0 = 42a7b09), as stored in the index:

- ``tensorrt_llm/__init__.py`` @8f91cff: ``from .llmapi.llm import LLM, LlmArgs, SamplingParams``,
  ``mpi_rank``; no ``_tensorrt_engine`` module (1.x), so ``tensorrt_llm.LLM`` runs engine folders.
- ``tensorrt_llm/llmapi/llm.py`` @42a7b09 ``LLM.__init__(model, tokenizer=None,
  tokenizer_mode='auto', skip_tokenizer_init=False, trust_remote_code=False,
  tensor_parallel_size=1, dtype="auto", revision=None, tokenizer_revision=None,
  speculative_model=None, **kwargs)`` -> ``LlmArgs.from_kwargs(...)``; the executor's
  ``max_beam_width`` is ``self.args.build_config.max_beam_width``; ``generate(inputs,
  sampling_params=None, use_tqdm=True, lora_request=None, prompt_adapter_request=None)``;
  ``_prepare_sampling_params`` (TypeError "The sampling_params must be type SamplingParams or
  None, but got ..."); ``_check_arguments`` (ValueError "The sum of prompt length (P) and
  max_tokens (T) should not exceed max_seq_len (M)", then ValueError "sampling_params's
  beam_width (W) should not exceed max_beam_width (M)", comparing ``sampling_params.beam_width``
  with ``build_config.max_beam_width``); only ``_shutdown()``, no public ``shutdown()``;
  ``generate_async(inputs, sampling_params=None, lora_request=None, prompt_adapter_request=None,
  streaming=False)`` (l.241-248, lines counted by hand), which prepares the sampling params
  (l.266), tokenizes, runs ``_check_arguments`` (l.280), hands the request to the executor
  (l.281-287) and returns ``RequestOutput(result, prompt, self.tokenizer)`` (l.288);
  ``generate`` calls it once per prompt (l.223-227) and then ``future.result()`` on each
  (l.234). ``RequestOutput`` (l.29-47) copies the ``GenerationResult``'s fields and adds
  ``prompt`` and ``tokenizer``: no ``cached_tokens`` (the ``executor`` module that defines
  ``GenerationResult`` is not stored at this commit; its ``abort()``, read in later versions,
  is not modelled here). At @8f91cff ``llmapi/llm.py`` is not stored: 0.15 is taken to match.
- ``LlmArgs`` is a plain dataclass without ``max_beam_width`` (trtllm-facts §3; ``llm_utils.py``
  is not stored at these commits): an unknown keyword is Python's TypeError; the limit comes
  from ``build_config`` (``BuildConfig.max_beam_width``, default 1).
- ``SamplingParams``: not stored at either commit. Modelled on the index's stored pre-1.x
  ``sampling_params.py`` of the same family (the only such version found; its fields
  ``min_p``/``return_perf_metrics`` suggest it is somewhat newer than 0.16): Hugging Face style
  ``beam_width``/``num_return_sequences`` *or* OpenAI style ``n``/``best_of``/``use_beam_search``
  (both: ValueError "Got ambiguous parameters..."); HF style sets ``n = beam_width``,
  ``use_beam_search = beam_width > 1``; ``best_of`` defaults to ``n``; greedy with
  ``best_of > 1`` is refused unless ``TLLM_ALLOW_N_GREEDY_DECODING``. With OpenAI-style
  parameters ``beam_width`` stays 1, so ``_check_arguments`` lets a too-wide ``best_of`` through
  to the C++ executor, whose check is not in this source: that refusal is modelled with a text
  marked "TEST DOUBLE".
- ``runtime/model_runner_cpp.py`` ``ModelRunnerCpp.from_dir(engine_dir, *, ...)`` @42a7b09
  (keyword-only, names below) and ``generate(batch_input_ids, *, ...)`` with its
  ``accepted_parameters`` and ``_fill_output`` @8f91cff: ``output_ids`` is ``[batch,
  num_sequences, max_seq_len]`` with ``num_sequences = num_return_sequences or num_beams``.
  Whether this line's executor accepts a beam width below its maximum is not in the Python
  source; trtllm-facts §2 places the refusal at ~0.10-0.13 and a relaxed check later: modelled
  as accepted (inferred).
- ``ModelRunner.from_dir(engine_dir, *, max_output_len=None, lora_dir=None, rank=0, ...)``
  keyword-only as trtllm-facts §2 records it (``model_runner.py`` is not stored at these commits);
  its decoder is taken to be configured by its first call as at 0.13.0.dev (not verified here).
- Memory: ``ModelRunnerCpp`` keeps the Executor as ``self.session`` (l.65 @8f91cff, l.66
  @42a7b09, lines counted by hand), shut down through it; KV-cache block reuse is
  ``from_dir(kv_cache_enable_block_reuse=False)`` (l.102 @8f91cff, l.105 @42a7b09) and the
  executor's ``KvCacheConfig(enableBlockReuse = false)`` (``executor/executor.h`` @42a7b09).
- The in-flight path (``tests/doubles/trtllm_executor.py`` has what the lines share):
  ``ModelRunnerCpp.generate`` @42a7b09 builds one ``trtllm.Request(input_token_ids=...,
  max_tokens=max_new_tokens, pad_id=..., end_id=..., sampling_config=..., streaming=...,
  output_config=..., ...)`` per prompt, ``self.session.enqueue_requests``, then
  ``self.session.await_responses(request_ids)`` and ``RuntimeError(response.error_msg)`` for an
  error response (``generate``, ``_initialize_and_fill_output``, ``_fill_output``); its
  SamplingConfig comes from ``accepted_parameters`` with ``num_beams`` renamed ``beam_width``
  (and ``random_seed`` ``seed``). ``executor/executor.h`` @42a7b09 declares the Executor's
  ``enqueueRequest``, ``awaitResponses(IdType, timeout)`` ("Responses may be empty"),
  ``cancelRequest``, ``shutdown`` and ``canEnqueueRequests``, the ``Request`` constructor
  (``inputTokenIds, maxTokens, streaming, samplingConfig, outputConfig, endId, padId,
  positionIds, ...``: the second parameter is ``max_tokens`` from here on), the
  ``SamplingConfig`` constructor (``beamWidth, topK, topP, topPMin, topPResetIds, topPDecay,
  seed, temperature, minTokens, beamSearchDiversityRate, repetitionPenalty, presencePenalty,
  frequencyPenalty, lengthPenalty, earlyStopping, noRepeatNgramSize, numReturnSequences``),
  ``OutputConfig`` (``excludeInputFromOutput`` false by default), ``Result`` (``isFinal``,
  ``outputTokenIds``, ``sequenceIndex``, ``requestPerfMetrics`` when asked for: no count of
  reused tokens) and ``Response``. ``llmRequest.h`` @42a7b09 ``GenericLlmRequest::validate``:
  a prompt over ``max_input_len`` refused, ``max_new_tokens`` cut to ``max_seq_len``. The
  pybind files (the Python names) and the executor's implementation are not stored at these
  commits, the executor's being closed source: the Python names are taken as
  ``ModelRunnerCpp`` uses them and in snake case of the header, the responses as the shared
  module models them, and a beam width above the executor's maximum is answered with the
  "TEST DOUBLE" text above (``wide_request``); the refusals after ``shutdown()`` are marked
  "TEST DOUBLE" too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.doubles import trtllm_common as common
from tests.doubles import trtllm_executor
from tests.doubles import trtllm_llmapi as llm_api
from tests.doubles import trtllm_runners as runners
from tests.doubles.signatures import Args, takes
from tests.doubles.trtllm_llmapi import BuildConfig

VERSION = "0.16.0"
LINE = "0.15-0.16"

# ``accepted_parameters`` of generate (model_runner_cpp.py @8f91cff)
CPP_ACCEPTED = runners.EXECUTOR_ACCEPTED | {"min_tokens", "num_return_sequences"}


def wide_request(width: int, max_beam_width: int) -> str | None:
    """The C++ executor's answer to a request wider than its maximum (text not in the source)."""
    if width <= max_beam_width:
        return None
    return (
        f"TEST DOUBLE: request beam width {width} above the executor's max_beam_width "
        f"{max_beam_width} (the C++ check's text is not modelled)"
    )


class SamplingConfig(trtllm_executor.SamplingConfig):
    """Double of bindings.executor.SamplingConfig 0.16 (``executor.h`` @42a7b09)."""

    @takes("""beam_width=1, top_k=None, top_p=None, top_p_min=None, top_p_reset_ids=None, top_p_decay=None,
        seed=None, temperature=None, min_tokens=None, beam_search_diversity_rate=None, repetition_penalty=None,
        presence_penalty=None, frequency_penalty=None, length_penalty=None, early_stopping=None,
        no_repeat_ngram_size=None, num_return_sequences=None""")
    def __init__(self, a: Args) -> None:
        super().__init__(a)


class Request(trtllm_executor.Request):
    """Double of bindings.executor.Request 0.16 (``executor.h`` @42a7b09, ``max_tokens``)."""

    @takes("""input_token_ids, max_tokens, streaming=False, sampling_config=None, output_config=None,
        end_id=None, pad_id=None, position_ids=None, bad_words=None, stop_words=None, embedding_bias=None,
        external_draft_tokens_config=None, prompt_tuning_config=None, mrope_config=None, lora_config=None,
        lookahead_config=None, kv_cache_retention_config=None, logits_post_processor_name=None,
        encoder_input_token_ids=None, client_id=None, return_all_generated_tokens=False, priority=0.5,
        type=None, context_phase_params=None, encoder_input_features=None, encoder_output_length=None,
        cross_attention_mask=None, num_return_sequences=1, eagle_config=None, skip_cross_attn_blocks=None,
        guided_decoding_params=None, allotted_time_ms=None""")
    def __init__(self, a: Args) -> None:
        super().__init__(a["input_token_ids"], a["max_tokens"], a, SamplingConfig)


class Executor(trtllm_executor.InflightExecutor):
    """Double of bindings.executor.Executor 0.16: the shared in-flight rules, this line's
    beam-width answer (its shutdown refusals: the shared double's, its executor being closed
    source)."""

    def beam_error(self, beams: int) -> str | None:
        return wide_request(beams, self.max_beam_width)


class ModelRunnerCpp(runners.ExecutorRunner):
    """Double of tensorrt_llm.runtime.ModelRunnerCpp 0.15/0.16 ([batch, num_beams, ...])."""

    ACCEPTED = CPP_ACCEPTED
    EXECUTOR: type[trtllm_executor.InflightExecutor] = Executor

    @classmethod
    @takes("""engine_dir, *, lora_dir=None, rank=0, max_batch_size=None, max_input_len=None,
        max_output_len=None, max_beam_width=None, max_attention_window_size=None, sink_token_length=None,
        kv_cache_free_gpu_memory_fraction=None, cross_kv_cache_fraction=None, medusa_choices=None,
        eagle_choices=None, eagle_posterior_threshold=None, lookahead_config=None, debug_mode=False,
        lora_ckpt_source='hf', gpu_weights_percent=1, max_tokens_in_paged_kv_cache=None,
        kv_cache_enable_block_reuse=False, enable_chunked_context=False, is_enc_dec=False,
        multi_block_mode=True, enable_context_fmha_fp32_acc=None, cuda_graph_mode=None,
        logits_processor_map=None, device_ids=None, is_orchestrator_mode=False, use_runtime_defaults=True""")
    def from_dir(cls, a: Args) -> ModelRunnerCpp:
        return cls.load_bound(a)

    @takes("""batch_input_ids, *, position_ids=None, encoder_input_ids=None, encoder_input_features=None,
        encoder_output_lengths=None, cross_attention_masks=None, sampling_config=None, lora_uids=None,
        lookahead_config=None, streaming=False, stopping_criteria=None, logits_processor_names=None,
        max_new_tokens=1, end_id=None, pad_id=None, bad_words_list=None, stop_words_list=None,
        return_dict=False, output_sequence_lengths=False, output_log_probs=False, output_cum_log_probs=False,
        prompt_table=None, prompt_tasks=None, input_token_extra_ids=None, return_all_generated_tokens=False,
        **kwargs""")
    def generate(self, a: Args) -> Any:
        return self.run_bound(a)


class ModelRunner(runners.SessionRunner):
    """Double of tensorrt_llm.runtime.ModelRunner 0.15/0.16 (keyword-only from_dir)."""

    @classmethod
    @takes("""engine_dir, *, max_output_len=None, lora_dir=None, rank=0, debug_mode=False,
        lora_ckpt_source='hf', medusa_choices=None, stream=None, gpu_weights_percent=1,
        enable_context_fmha_fp32_acc=None, multi_block_mode=None""")
    def from_dir(cls, a: Args) -> ModelRunner:
        return cls.load_bound(a)

    @takes("""batch_input_ids, position_ids=None, sampling_config=None, prompt_table=None, prompt_tasks=None,
        lora_uids=None, streaming=False, stopping_criteria=None, logits_processor=None, medusa_choices=None,
        **kwargs""")
    def generate(self, a: Args) -> Any:
        return self.run_bound(a)


@dataclass(kw_only=True)
class SamplingParams(llm_api.OpenAiSampling):
    """Double of the 0.15/0.16-era SamplingParams (HF or OpenAI style beam parameters)."""

    beam_width: int = 1
    num_return_sequences: int | None = None
    top_k: int | None = None
    top_p: float | None = None
    temperature: float | None = None
    length_penalty: float | None = None
    early_stopping: int | None = None
    return_log_probs: bool = False
    detokenize: bool = True

    def __post_init__(self) -> None:
        self._pad_as_end()
        hf_style = self.beam_width > 1 or self.num_return_sequences
        if hf_style and (self.n > 1 or self.best_of or self.use_beam_search):
            raise ValueError(
                "Got ambiguous parameters. Please specify either Hugging Face style "
                "parameters (beam_width or num_return_sequences) or OpenAI style "
                "parameters (n, best_of, or use_beam_search), but not both"
            )
        if hf_style:
            self.n, self.best_of = self.beam_width, self.num_return_sequences
            self.use_beam_search = self.beam_width > 1
        self.best_of = self.best_of or self.n
        self._validate()

    def _validate(self) -> None:
        best_of = self.best_of
        assert best_of is not None  # set to n by __post_init__
        if best_of > 1 and best_of < self.n:
            raise ValueError(
                f"In beam search, beam_width ({self.beam_width}) must be greater than or "
                f"equal to num_return_sequences ({self.num_return_sequences})."
            )
        greedy = not self.use_beam_search and self.top_k in (None, 1) and self.top_p in (None, 0.0)
        self._refuse_greedy_best_of(greedy)


class KvCacheConfig:
    """Double of ``tensorrt_llm.llmapi.KvCacheConfig`` 0.15/0.16: in this era the executor's
    pybind class (``py::arg("enable_block_reuse") = false``, as at 0.13.0.dev
    ``pybind/executor/bindings.cpp`` l.355); ``llm_utils.py``/``llmapi/__init__.py`` are not
    stored at the tag commits: not verified there."""

    def __init__(self, enable_block_reuse: bool = False, **_others: Any) -> None:
        self.enable_block_reuse = enable_block_reuse


@dataclass(kw_only=True)
class LlmArgs(llm_api.LlmArgsBase):
    """Double of the 0.15/0.16 LlmArgs: a plain dataclass, no ``max_beam_width``."""

    speculative_model: str | None = None
    build_config: BuildConfig | None = None
    kv_cache_config: Any = None
    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    enable_chunked_prefill: bool = False

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> LlmArgs:
        return cls(**kwargs)


def _engine_build_config(model: str) -> BuildConfig | None:
    config = common.engine_config(model)
    if "build_config" not in config:
        return None  # a checkpoint: the LLM builds an engine with args.build_config
    return BuildConfig.of(config["build_config"])


class LLM(llm_api.LlmApi[SamplingParams]):
    """Double of tensorrt_llm.LLM 0.16 (TensorRT engines; checkpoints are built first)."""

    SAMPLING_PARAMS = SamplingParams
    KV_CACHE_CONFIG = KvCacheConfig

    @takes("""model, tokenizer=None, tokenizer_mode='auto', skip_tokenizer_init=False, trust_remote_code=False,
        tensor_parallel_size=1, dtype='auto', revision=None, tokenizer_revision=None, speculative_model=None,
        **kwargs""")
    def __init__(self, a: Args) -> None:
        self.args = LlmArgs.from_kwargs(**llm_api.named_args_of(a), **a["kwargs"])
        self.args.build_config = _engine_build_config(a["model"]) or self.args.build_config or BuildConfig()
        if self.args.build_config.max_seq_len is None:
            self.args.build_config.max_seq_len = 2048  # a checkpoint's build (default inferred)
        self._start("tensorrt_llm.LLM", self.args, a["kwargs"], self.args.build_config.max_beam_width)

    @takes("inputs, sampling_params=None, use_tqdm=True, lora_request=None, prompt_adapter_request=None")
    def generate(self, a: Args) -> Any:
        return self._generate(a["inputs"], a["sampling_params"], a["use_tqdm"])

    @takes("inputs, sampling_params=None, lora_request=None, prompt_adapter_request=None, streaming=False")
    def generate_async(self, a: Args) -> llm_api.PendingOutput:
        return self._generate_async(a["inputs"], a["sampling_params"], a["streaming"])

    def _running(self) -> trtllm_executor.Executor:
        if self._executor is None or not self._executor.alive:
            raise RuntimeError("the LLM's executor was shut down")
        return self._executor

    def _check_arguments(self, prompt_len: int, sp: SamplingParams) -> None:
        build = self.args.build_config
        assert build is not None and build.max_seq_len is not None  # set by __init__
        if not self.args.enable_chunked_prefill and prompt_len + sp.max_tokens > build.max_seq_len:
            raise ValueError(
                f"The sum of prompt length ({prompt_len}) and max_tokens ({sp.max_tokens}) "
                f"should not exceed max_seq_len ({build.max_seq_len})"
            )
        if sp.beam_width > build.max_beam_width:
            raise ValueError(
                f"sampling_params's beam_width ({sp.beam_width}) should not exceed "
                f"max_beam_width ({build.max_beam_width})"
            )

    def _verify_request(self, executor: trtllm_executor.Executor, width: int) -> None:
        error = wide_request(width, executor.max_beam_width)
        if error is not None:
            raise RuntimeError(error)

    def _shutdown(self) -> None:
        self._stop()


def install(monkeypatch: pytest.MonkeyPatch) -> common.Recorder:
    """Put this double into sys.modules as ``tensorrt_llm`` 0.16.0."""
    package = {"LLM": LLM, "LlmArgs": LlmArgs, "SamplingParams": SamplingParams, "BuildConfig": BuildConfig}
    modules = llm_api.line_modules(ModelRunner, ModelRunnerCpp, LLM, SamplingParams, KvCacheConfig)
    return common.install_line(
        monkeypatch,
        VERSION,
        "tests/doubles/trtllm_0_15.py",
        {
            "tensorrt_llm": package,
            **modules,
            **trtllm_executor.bindings_modules(Executor, Request, SamplingConfig),
            "tensorrt_llm._tensorrt_engine": None,
        },
    )


def make_engine_dir(path: Path, **kwargs: Any) -> Path:
    """A unified engine directory whose config.json says 0.16.0 (the 0.13 sample, version set)."""
    return common.make_engine_dir(path, version=VERSION, **kwargs)
