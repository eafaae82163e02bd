"""What several of the per-release TEST DOUBLES of ``tensorrt_llm`` implement the same way in
``tensorrt_llm.runtime``: ``ModelRunnerCpp`` on the Executor (0.13.0.dev2024082000, 0.15, 0.16,
and 1.x assumed: ``ExecutorRunner``) and the Python ``ModelRunner`` from 0.13.0.dev on
(``SessionRunner``); their docstrings say what is shared and where it was read. None of this
is TensorRT-LLM; each line's own module says where its behaviour was read from, and sets what
differs by line. The LLM API's shared pieces are in tests/doubles/trtllm_llmapi.py.
"""

from __future__ import annotations

from typing import Any, TypeVar

from tests.doubles import trtllm_common as common
from tests.doubles.signatures import Args
from tests.doubles.trtllm_common import Limits
from tests.doubles.trtllm_executor import InflightExecutor

_R = TypeVar("_R", bound="ExecutorRunner")
_S = TypeVar("_S", bound="SessionRunner")


# the ``accepted_parameters`` of ModelRunnerCpp.generate (model_runner_cpp.py) that
# 0.13.0.dev2024082000 and 0.15/0.16 (@8f91cff) share; each line adds its own
EXECUTOR_ACCEPTED = frozenset(
    {
        "num_beams",
        "top_k",
        "top_p",
        "top_p_min",
        "top_p_reset_ids",
        "top_p_decay",
        "random_seed",
        "temperature",
        "beam_search_diversity_rate",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "length_penalty",
        "early_stopping",
        "no_repeat_ngram_size",
    }
)


class ExecutorRunner:
    """What ``ModelRunnerCpp`` on the Executor does the same way on 0.13.0.dev, 0.15, 0.16
    (``model_runner_cpp.py``): limits from the unified config (``max_seq_len`` from build_config),
    ``assert`` on runtime limits above the engine's, the sampling keywords filtered through
    ``accepted_parameters`` (others dropped silently), ``num_beams`` renamed to ``beam_width``,
    ``_check_inputs``, and a response error raised as ``RuntimeError(response.error_msg)``.
    A line sets ``ACCEPTED``, ``EXECUTOR`` (its Executor, with its in-flight rules), ``width``
    (the output's beam dimension) and ``refusal``."""

    ACCEPTED: frozenset[str] = frozenset()
    EXECUTOR: type[InflightExecutor]
    NAME = "ModelRunnerCpp"
    EXECUTOR_ATTR = "session"  # where the runner keeps its Executor (1.x: "executor")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.max_beam_width = limits.max_beam_width
        self.max_batch_size = limits.max_batch_size  # ModelRunnerCpp.__init__ keeps it (l.53 @04c5298)
        setattr(self, self.EXECUTOR_ATTR, self.EXECUTOR(limits))

    @property
    def executor_(self) -> InflightExecutor:
        executor: InflightExecutor = getattr(self, self.EXECUTOR_ATTR)
        return executor

    @classmethod
    def load(
        cls: type[_R],
        engine_dir: str,
        rank: int,
        max_batch_size: int | None,
        max_beam_width: int | None,
        kv_cache_enable_block_reuse: bool,
    ) -> _R:
        limits = Limits.unified(engine_dir)
        limits.lower("max_batch_size", max_batch_size)
        limits.lower("max_beam_width", max_beam_width)
        runner = cls(limits)
        common.record_load(
            cls.NAME,
            engine_dir=engine_dir,
            rank=rank,
            max_beam_width=max_beam_width,
            kv_cache_enable_block_reuse=kv_cache_enable_block_reuse,
        )
        return runner

    @classmethod
    def load_bound(cls: type[_R], a: Args) -> _R:
        """``load`` from ``from_dir``'s bound arguments (``signatures.takes``)."""
        return cls.load(
            a["engine_dir"],
            a["rank"],
            a["max_batch_size"],
            a["max_beam_width"],
            a["kv_cache_enable_block_reuse"],
        )

    def run_bound(self, a: Args) -> Any:
        """``run`` from ``generate``'s bound arguments (``signatures.takes``)."""
        return self.run(
            a["batch_input_ids"],
            a["max_new_tokens"],
            a["end_id"],
            a["pad_id"],
            a["return_dict"],
            a["output_sequence_lengths"],
            a["kwargs"],
        )

    def width(self, beams: int) -> int:
        return beams

    def refusal(self, beams: int) -> str | None:
        """The executor's error for a request of ``beams`` beams, if it refuses it."""
        return None

    def run(
        self,
        batch_input_ids: Any,
        max_new_tokens: int,
        end_id: Any,
        pad_id: Any,
        return_dict: bool,
        output_sequence_lengths: bool,
        kwargs: dict[str, Any],
    ) -> Any:
        if not self.executor_.alive:
            raise RuntimeError("the executor was shut down")
        if not self.executor_.can_enqueue_requests():
            return []
        common.record_ignored(kwargs, self.ACCEPTED)
        ids = common.token_lists(batch_input_ids)
        common.RECORDER.calls.append(
            {
                "runner": self.NAME,
                "ids": ids,
                "max_new_tokens": max_new_tokens,
                "end_id": end_id,
                "pad_id": pad_id,
                **kwargs,
            }
        )
        beams = kwargs.get("num_beams", 1)
        common.check_inputs(self.limits, ids, max_new_tokens, beams)
        error = self.refusal(beams)
        if error is not None:
            raise RuntimeError(error)
        return common.pack(
            ids,
            beams=beams,
            width=self.width(beams),
            seq_len=self.limits.max_seq_len,
            end_id=end_id,
            max_new_tokens=max_new_tokens,
            return_dict=return_dict,
            output_sequence_lengths=output_sequence_lengths,
        )


# tensorrt_llm.runtime.SamplingConfig fields (generation.py @0.13.0.dev2024082000: 0.9's plus
# no_repeat_ngram_size); ModelRunner.generate(**kwargs) sets these and drops the rest. Not
# stored at the 0.15/0.16/1.x release commits: assumed unchanged there.
SAMPLING_CONFIG_FIELDS = frozenset(
    {
        "end_id",
        "pad_id",
        "max_new_tokens",
        "num_beams",
        "max_attention_window_size",
        "sink_token_length",
        "output_sequence_lengths",
        "return_dict",
        "stop_words_list",
        "bad_words_list",
        "temperature",
        "top_k",
        "top_p",
        "top_p_decay",
        "top_p_min",
        "top_p_reset_ids",
        "length_penalty",
        "early_stopping",
        "repetition_penalty",
        "min_length",
        "presence_penalty",
        "frequency_penalty",
        "use_beam_hyps",
        "beam_search_diversity_rate",
        "random_seed",
        "output_cum_log_probs",
        "output_log_probs",
        "no_repeat_ngram_size",
    }
)


class SessionRunner:
    """``ModelRunner`` (the Python GenerationSession) as 0.13.0.dev and later lines share it:
    limits from build_config (``max_seq_len``), kwargs into ``SamplingConfig.update`` (unknown
    keys dropped), ``_check_inputs``, output ``[batch, num_beams, longest prompt + max_new_tokens]``."""

    FIELDS: frozenset[str] = SAMPLING_CONFIG_FIELDS

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.max_beam_width = limits.max_beam_width
        self.decoder_width: int | None = None  # fixed by the first call
        common.RECORDER.gpu.claim(self)

    def holds_gpu(self) -> bool:
        return True  # until released

    @classmethod
    def load(cls: type[_S], engine_dir: str, rank: int) -> _S:
        runner = cls(Limits.unified(engine_dir))
        common.record_load("ModelRunner", engine_dir=engine_dir, rank=rank)
        return runner

    @classmethod
    def load_bound(cls: type[_S], a: Args) -> _S:
        """``load`` from ``from_dir``'s bound arguments (``signatures.takes``)."""
        return cls.load(a["engine_dir"], a["rank"])

    def run_bound(self, a: Args) -> Any:
        """``run`` from ``generate``'s bound arguments (``signatures.takes``)."""
        return self.run(a["batch_input_ids"], a["kwargs"])

    def run(self, batch_input_ids: Any, kwargs: dict[str, Any]) -> Any:
        common.record_ignored(kwargs, self.FIELDS)
        values: dict[str, Any] = {
            "max_new_tokens": 20,
            "num_beams": 1,
            "end_id": None,
            "return_dict": False,
            "output_sequence_lengths": False,
            **{k: v for k, v in kwargs.items() if k in self.FIELDS},
        }
        ids = common.token_lists(batch_input_ids)
        common.RECORDER.calls.append({"runner": "ModelRunner", "ids": ids, **kwargs})
        common.check_inputs(self.limits, ids, values["max_new_tokens"], values["num_beams"])
        common.first_call_decoder(self, values["num_beams"])
        return common.pack(
            ids,
            beams=values["num_beams"],
            width=values["num_beams"],
            seq_len=max(len(x) for x in ids) + values["max_new_tokens"],
            end_id=values["end_id"],
            max_new_tokens=values["max_new_tokens"],
            return_dict=values["return_dict"],
            output_sequence_lengths=values["output_sequence_lengths"],
        )
