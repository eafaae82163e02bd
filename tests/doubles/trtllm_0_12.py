"""TEST DOUBLE of ``tensorrt_llm`` of the 0.12-0.13 line: it is NOT TensorRT-LLM and runs no model.

Read from one upstream state: the weekly push ``0.13.0.dev2024082000`` (2024-08-20, between the
0.12.0 and 0.13.0 releases), as kept on branch ``0.13.0.dev2024082000`` of nyunAI/TensorRT-LLM
(commit 04c5298, "pull from upstream"). The 0.12.0 and 0.13.0 release commits (28fb9aa,
201135e in triton-inference-server/tensorrtllm_backend's submodule) are not stored in the
index, so this is the nearest state read:

- ``tensorrt_llm/version.py``: ``__version__ = "0.13.0.dev2024082000"``; ``__init__.py`` exports
  ``LLM``, ``LlmArgs`` and ``SamplingParams`` from ``hlapi/llm.py``, ``mpi_rank``.
- ``hlapi/utils.py`` ``SamplingParams``: ``@dataclass(slots=True)`` with ``end_id, pad_id,
  max_new_tokens=32, ..., beam_width=1, top_k, top_p, ..., length_penalty, early_stopping``;
  no ``use_beam_search``/``n``/``best_of`` (0.15 on).
- ``runtime/model_runner_cpp.py`` ``ModelRunnerCpp`` wraps ``bindings.executor.Executor``
  (in-flight batching). ``from_dir(engine_dir, *, lora_dir=None, rank=0, max_batch_size=None,
  max_input_len=None, max_output_len=None, max_beam_width=None, max_attention_window_size=None,
  sink_token_length=None, kv_cache_free_gpu_memory_fraction=None, medusa_choices=None,
  lookahead_config=None, debug_mode=False, lora_ckpt_source="hf", gpu_weights_percent=1,
  max_tokens_in_paged_kv_cache=None, kv_cache_enable_block_reuse=False,
  enable_chunked_context=False, is_enc_dec=False, multi_block_mode=None,
  enable_context_fmha_fp32_acc=None)``: keyword-only; ``ExecutorConfig(max_beam_width=...)`` is
  the given value or the engine's.
- ``generate(batch_input_ids, *, encoder_input_ids=None, sampling_config=None, lora_uids=None,
  streaming=False, stopping_criteria=None, logits_processor=None, max_new_tokens=1, end_id=None,
  pad_id=None, bad_words_list=None, stop_words_list=None, return_dict=False,
  output_sequence_lengths=False, output_log_probs=False, output_cum_log_probs=False,
  prompt_table=None, prompt_tasks=None, return_all_generated_tokens=False, **kwargs)``: only the
  ``accepted_parameters`` listed there reach ``trtllm.SamplingConfig`` (``num_beams`` renamed
  ``beam_width``), others are dropped silently; ``_check_inputs`` uses ``beam_width``.
- ``_initialize_and_fill_output``: ``output_ids`` is ``[batch, self.max_beam_width, max_seq_len]``
  (the executor's maximum, whatever the request's width); beams a request did not use stay
  empty: length 0 in ``sequence_lengths``, all end_id. A response error is
  ``RuntimeError(response.error_msg)`` (``_fill_output``).
- In-flight batching refuses a request whose beam width differs from the executor's
  ``max_beam_width``: "Assertion failed: Request with beam width 1 differs from the max beam
  width 3" (NVIDIA/TensorRT-LLM #1282; tensorrtllm_backend #154 shows the full text from
  ``batch_manager/trtGptModelInflightBatching.cpp``, prefixed "Encountered an error in forward
  function: [TensorRT-LLM][ERROR] "). The batch manager's source is not public at this version:
  that the text reaches ``generate`` as the response's error message is inferred from
  ``_fill_output``; the source location and stack trace that follow it are left out here.
- ``runtime/model_runner.py`` ``ModelRunner.from_dir(engine_dir, max_output_len=None,
  lora_dir=None, rank=0, debug_mode=False, lora_ckpt_source="hf", medusa_choices=None,
  stream=None, gpu_weights_percent=1, enable_context_fmha_fp32_acc=None)``: positional, with
  ``max_output_len`` second; the Python session has no executor and no such refusal, but its
  decoder is configured by its first call (``thop/dynamicDecodeOp.cpp`` l.56 creates it in
  ``DecodingMode::Auto()``; ``layers/dynamicDecodeLayer.cpp`` l.111-124 then refuses other
  widths; ``trtllm_common.first_call_decoder``); ``ModelRunner.from_dir`` takes no beam width
  (``model_runner.py`` l.580-592).
- Memory: ``ModelRunnerCpp`` keeps the Executor as ``self.session`` (``model_runner_cpp.py``
  l.52) and has no shutdown of its own; the Executor binding has ``shutdown()``
  (``pybind/executor/executor.cpp`` l.72-87): until then, or until released, it holds the GPU.
- KV-cache block reuse: ``from_dir(kv_cache_enable_block_reuse=False)`` (l.87, passed to
  ``KvCacheConfig`` l.231; the executor's own default is off too, ``executor/executor.h``
  l.494).

- The in-flight path (``tests/doubles/trtllm_executor.py`` has what the lines share): the
  Executor binding (``cpp/tensorrt_llm/pybind/executor/executor.cpp`` l.105-125) has
  ``enqueue_request(request)``, ``await_responses(id, timeout=None)`` (the GIL released while it
  waits, ``pybind/executor/executor.h`` l.64-83), ``cancel_request(id)``, ``shutdown()`` and
  ``can_enqueue_requests()``; ``executor.h`` l.967-1030 declares them. ``Request(input_token_ids,
  max_new_tokens, streaming=False, sampling_config=SamplingConfig(), output_config=OutputConfig(),
  end_id=None, pad_id=None, ...)`` (``pybind/executor/bindings.cpp`` l.246-262; ``executor.h``
  l.329-342): the second parameter is ``max_new_tokens`` here, as ``ModelRunnerCpp.generate``
  passes it (``model_runner_cpp.py`` l.483-494). ``SamplingConfig(beam_width=1, top_k=None, ...,
  length_penalty=None, early_stopping=None, no_repeat_ngram_size=None)`` (``bindings.cpp``
  l.174-188), which ``generate`` builds from its ``accepted_parameters`` with ``num_beams``
  renamed ``beam_width`` (l.442-460). ``generate`` enqueues the batch (l.503), awaits the ids
  (l.555) and raises ``RuntimeError(response.error_msg)`` for an error response (l.597-598).
  The executor itself is closed source at this commit: its responses are modelled from the
  bindings' tests (``tests/bindings/test_executor_bindings.py``: ``test_shutdown`` l.78-110,
  ``test_multi_request_with_ids`` l.329-387, ``test_gpt_executor_timed_out`` l.691-704,
  ``test_single_request_invalid_inputs`` l.707-735) and the public ``llmRequest.h`` (``validate``
  l.260-312: a prompt over ``max_input_len`` refused, ``max_new_tokens`` cut to ``max_seq_len``).
  The texts this executor gives for a refused enqueue or await after ``shutdown()`` are not in
  the source (the tests expect an exception only): marked "TEST DOUBLE"; nor is what it puts
  before the validation's message (none here). Beam widths: the rule above (a request whose
  width differs from the executor's maximum is answered with that error); ``docs/source/
  executor.md`` l.63-72 at this commit describes instead an executor that reconfigures itself
  for any width up to its maximum once its queue is empty: the harness sends every request of a
  path at the width its runner was loaded with, so the two differ only for a width above the
  maximum, which both refuse.

Not modelled: legacy (builder_config) engines (an engine from 0.5-0.8 would not deserialize
with this release's TensorRT anyway), the hlapi ``LLM`` beyond its refusal by the llmapi backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.doubles import trtllm_common as common
from tests.doubles import trtllm_executor
from tests.doubles import trtllm_runners as runners
from tests.doubles.signatures import Args, takes

VERSION = "0.13.0.dev2024082000"
LINE = "0.12-0.13"

# ``accepted_parameters`` of generate (model_runner_cpp.py @0.13.0.dev2024082000)
CPP_ACCEPTED = runners.EXECUTOR_ACCEPTED | {"min_length"}


def beam_refusal(beams: int, max_beam_width: int) -> str | None:
    """In-flight batching's answer to a request whose beam width differs from the executor's
    maximum (#1282, tensorrtllm_backend #154; see the module docstring)."""
    if beams == max_beam_width:
        return None
    return (
        "Encountered an error in forward function: [TensorRT-LLM][ERROR] Assertion failed: "
        f"Request with beam width {beams} differs from the max beam width {max_beam_width}"
    )


class SamplingConfig(trtllm_executor.SamplingConfig):
    """Double of bindings.executor.SamplingConfig 0.13.0.dev (``bindings.cpp`` l.174-188)."""

    @takes("""beam_width=1, top_k=None, top_p=None, top_p_min=None, top_p_reset_ids=None, top_p_decay=None,
        random_seed=None, temperature=None, min_length=None, beam_search_diversity_rate=None,
        repetition_penalty=None, presence_penalty=None, frequency_penalty=None, length_penalty=None,
        early_stopping=None, no_repeat_ngram_size=None""")
    def __init__(self, a: Args) -> None:
        super().__init__(a)


class Request(trtllm_executor.Request):
    """Double of bindings.executor.Request 0.13.0.dev (``bindings.cpp`` l.246-262)."""

    @takes("""input_token_ids, max_new_tokens, streaming=False, sampling_config=None, output_config=None,
        end_id=None, pad_id=None, bad_words=None, stop_words=None, embedding_bias=None,
        external_draft_tokens_config=None, prompt_tuning_config=None, lora_config=None, lookahead_config=None,
        logits_post_processor_name=None, encoder_input_token_ids=None, client_id=None,
        return_all_generated_tokens=False""")
    def __init__(self, a: Args) -> None:
        super().__init__(a["input_token_ids"], a["max_new_tokens"], a, SamplingConfig)


class Executor(trtllm_executor.InflightExecutor):
    """Double of bindings.executor.Executor 0.13.0.dev: the shared in-flight rules, this line's
    beam-width answer (its shutdown refusals: the shared double's, its executor being closed
    source)."""

    def beam_error(self, beams: int) -> str | None:
        return beam_refusal(beams, self.max_beam_width)


class ModelRunnerCpp(runners.ExecutorRunner):
    """Double of tensorrt_llm.runtime.ModelRunnerCpp 0.13.0.dev2024082000 (Executor)."""

    ACCEPTED = CPP_ACCEPTED
    EXECUTOR = Executor

    @classmethod
    @takes("""engine_dir, *, lora_dir=None, rank=0, max_batch_size=None, max_input_len=None,
        max_output_len=None, max_beam_width=None, max_attention_window_size=None, sink_token_length=None,
        kv_cache_free_gpu_memory_fraction=None, medusa_choices=None, lookahead_config=None, debug_mode=False,
        lora_ckpt_source='hf', gpu_weights_percent=1, max_tokens_in_paged_kv_cache=None,
        kv_cache_enable_block_reuse=False, enable_chunked_context=False, is_enc_dec=False,
        multi_block_mode=None, enable_context_fmha_fp32_acc=None""")
    def from_dir(cls, a: Args) -> ModelRunnerCpp:
        return cls.load_bound(a)

    def width(self, beams: int) -> int:
        return self.max_beam_width

    def refusal(self, beams: int) -> str | None:
        return beam_refusal(beams, self.max_beam_width)

    @takes("""batch_input_ids, *, encoder_input_ids=None, sampling_config=None, lora_uids=None,
        streaming=False, stopping_criteria=None, logits_processor=None, max_new_tokens=1, end_id=None,
        pad_id=None, bad_words_list=None, stop_words_list=None, return_dict=False,
        output_sequence_lengths=False, output_log_probs=False, output_cum_log_probs=False, prompt_table=None,
        prompt_tasks=None, return_all_generated_tokens=False, **kwargs""")
    def generate(self, a: Args) -> Any:
        return self.run_bound(a)


class ModelRunner(runners.SessionRunner):
    """Double of tensorrt_llm.runtime.ModelRunner 0.13.0.dev2024082000 (positional from_dir)."""

    @classmethod
    @takes("""engine_dir, max_output_len=None, lora_dir=None, rank=0, debug_mode=False, lora_ckpt_source='hf',
        medusa_choices=None, stream=None, gpu_weights_percent=1, enable_context_fmha_fp32_acc=None""")
    def from_dir(cls, a: Args) -> ModelRunner:
        return cls.load_bound(a)

    @takes("""batch_input_ids, sampling_config=None, prompt_table=None, prompt_tasks=None, lora_uids=None,
        streaming=False, stopping_criteria=None, logits_processor=None, medusa_choices=None, **kwargs""")
    def generate(self, a: Args) -> Any:
        return self.run_bound(a)


@dataclass(slots=True)
class SamplingParams:
    """Double of the 0.13.0.dev hlapi SamplingParams (``beam_width``, no ``use_beam_search``)."""

    end_id: int | None = None
    pad_id: int | None = None
    max_new_tokens: int = 32
    beam_width: int = 1
    top_k: int | None = None
    top_p: float | None = None
    temperature: float | None = None
    length_penalty: float | None = None
    early_stopping: int | None = None


class LLM:
    """Double of the 0.13.0.dev hlapi LLM: not modelled (the llmapi backend refuses this line)."""

    def __init__(self, model: str, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("TEST DOUBLE: the 0.13.0.dev hlapi LLM is not modelled")


def install(monkeypatch: pytest.MonkeyPatch) -> common.Recorder:
    """Put this double into sys.modules as ``tensorrt_llm`` 0.13.0.dev2024082000."""
    return common.install_line(
        monkeypatch,
        VERSION,
        "tests/doubles/trtllm_0_12.py",
        {
            "tensorrt_llm": {"LLM": LLM, "SamplingParams": SamplingParams},
            "tensorrt_llm.runtime": {"ModelRunner": ModelRunner, "ModelRunnerCpp": ModelRunnerCpp},
            **trtllm_executor.bindings_modules(Executor, Request, SamplingConfig),
        },
    )


def make_engine_dir(path: Path, **kwargs: Any) -> Path:
    """An engine directory as trtllm-build of this line writes it (max_seq_len)."""
    return common.make_engine_dir(path, version=VERSION, **kwargs)
