"""TEST DOUBLE of the ``tensorrt_llm`` package: it is NOT TensorRT-LLM and runs no model.

TensorRT-LLM cannot run on the CPU machines these tests run on, so ``install(monkeypatch)``
puts this fake package into ``sys.modules`` as ``tensorrt_llm`` (with ``tensorrt_llm.runtime``
and ``tensorrt_llm._tensorrt_engine``). It enforces the real interfaces written down in
``../shared/reference/trtllm-facts.md`` §2-3 and checked against TensorRT-LLM's source:

- ``ModelRunnerCpp.from_dir(engine_dir, *, rank=0, max_batch_size=None, ...)`` and
  ``ModelRunner.from_dir(engine_dir, *, max_output_len=None, rank=0, ...)``: keyword-only
  options with the real names; limits read from the engine's ``config.json``;
- ``ModelRunnerCpp.generate(batch_input_ids, *, max_new_tokens, end_id, pad_id, return_dict,
  output_sequence_lengths, ..., **sampling)`` (keyword-only) and ``ModelRunner.generate(
  batch_input_ids, position_ids=None, sampling_config=None, ..., **sampling_config_fields)``;
  ``batch_input_ids`` must be a list of 1-D integer ``torch.Tensor``. Unknown keyword
  arguments raise TypeError (the real runners ignore unknown sampling keywords silently,
  which would hide a misspelt one);
- the real checks and messages, in the real order: ``Input batch size (B) exceeds the engine
  or specified limit (M)``, ``Maximum input length ...``, ``... + maximum new tokens ...``,
  ``Num beams (N) exceeds the engine or specified limit (M)`` (RuntimeError);
- outputs: ``output_ids`` int32 ``[batch, beams, max_seq_len]`` with the prompt included and
  end_id padding, ``sequence_lengths`` int32 ``[batch, beams]`` counting the prompt;
- ``LLM(model, tokenizer=None, ..., trust_remote_code=False, **llm_args)`` and
  ``SamplingParams(*, end_id, pad_id, max_tokens, n, best_of, use_beam_search, ...)``
  (keyword-only dataclass); an engine directory refuses ``best_of`` above its
  ``max_beam_width`` with the real ValueError, a checkpoint (PyTorch backend) refuses a
  request beam width different from the LLM's ``max_beam_width``.

"Generation" is a deterministic function of the prompt's token ids (``continuation``), so a
healthy engine gives every batch position the batch-size-1 output. ``corrupt_from`` turns
positions from that index on into the -1-then-garbage pattern of TensorRT-LLM issue #2072.
Every call is recorded in ``Recorder`` for the tests to inspect.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

VERSION = "0.13.0"

# ModelRunnerCpp.generate turns these keywords into its SamplingConfig (model_runner_cpp.py)
CPP_SAMPLING = frozenset({
    "num_beams", "top_k", "top_p", "top_p_min", "top_p_reset_ids", "top_p_decay", "temperature",
    "min_tokens", "beam_search_diversity_rate", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "length_penalty", "early_stopping", "no_repeat_ngram_size",
    "random_seed", "num_return_sequences", "min_p", "beam_width_array"})
# tensorrt_llm.runtime.SamplingConfig fields that ModelRunner.generate(**kwargs) updates
PY_SAMPLING = frozenset({
    "end_id", "pad_id", "max_new_tokens", "num_beams", "max_attention_window_size",
    "sink_token_length", "output_sequence_lengths", "return_dict", "stop_words_list",
    "bad_words_list", "temperature", "top_k", "top_p", "top_p_decay", "top_p_min",
    "top_p_reset_ids", "length_penalty", "early_stopping", "repetition_penalty", "min_length",
    "presence_penalty", "frequency_penalty", "use_beam_hyps", "beam_search_diversity_rate",
    "random_seed", "output_cum_log_probs", "output_log_probs", "no_repeat_ngram_size"})
# a few LlmArgs an LLM(...) call may pass as keywords
LLM_ARGS = frozenset({"max_beam_width", "max_batch_size", "max_num_tokens", "max_seq_len",
                      "max_input_len", "kv_cache_config", "build_config", "backend",
                      "enable_chunked_prefill", "pipeline_parallel_size"})


@dataclass
class Recorder:
    """What the adapters did to the double."""

    loads: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    shutdowns: int = 0
    corrupt_from: int | None = None  # batch position from which outputs are garbage


RECORDER = Recorder()


def continuation(prompt: list[int], beam: int, max_new_tokens: int, end_id: int) -> list[int]:
    """The double's "model": a prompt- and beam-dependent slice of the prompt's own ids
    (3 to 11 tokens, never end_id)."""
    source = [t for t in prompt if t != end_id] or [0]
    length = min(max_new_tokens, 3 + (len(prompt) + 3 * beam) % 9)
    return [source[(2 * beam + 1 + j) % len(source)] for j in range(length)]


def _garbage(length: int) -> list[int]:
    return [-1] + [7 + (13 * j) % 50 for j in range(max(length - 1, 0))]


def _limits(engine_dir: str) -> dict[str, int]:
    config = json.loads((Path(engine_dir) / "config.json").read_text())
    build = config["build_config"]
    seq = build.get("max_seq_len") or build["max_input_len"] + build["max_output_len"]
    return {"max_batch_size": build["max_batch_size"], "max_input_len": build["max_input_len"],
            "max_seq_len": seq, "max_beam_width": build["max_beam_width"]}


def _check_batch(batch_input_ids: Any) -> list[list[int]]:
    if not isinstance(batch_input_ids, list) or not batch_input_ids:
        raise TypeError(f"batch_input_ids must be a non-empty list of torch.Tensor, got "
                        f"{type(batch_input_ids).__name__}")
    out = []
    for t in batch_input_ids:
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.numel() == 0:
            raise TypeError("each batch_input_ids entry must be a non-empty 1-D torch.Tensor "
                            "(sequence_length,)")
        if t.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"batch_input_ids tensors must hold token ids, got {t.dtype}")
        out.append([int(x) for x in t.tolist()])
    return out


class _Runner:
    """What both runners share: limits from the engine, checks, the output layout."""

    def __init__(self, engine_dir: str, limits: dict[str, int]) -> None:
        self.engine_dir = engine_dir
        self.max_batch_size = limits["max_batch_size"]
        self.max_input_len = limits["max_input_len"]
        self.max_seq_len = limits["max_seq_len"]
        self.max_beam_width = limits["max_beam_width"]

    def _check_inputs(self, ids: list[list[int]], max_new_tokens: int, num_beams: int) -> None:
        if len(ids) > self.max_batch_size:
            raise RuntimeError(f"Input batch size ({len(ids)}) exceeds the engine or specified "
                               f"limit ({self.max_batch_size})")
        longest = max(len(x) for x in ids)
        if longest > self.max_input_len:
            raise RuntimeError(f"Maximum input length ({longest}) exceeds the engine or specified "
                               f"limit ({self.max_input_len})")
        if longest + max_new_tokens > self.max_seq_len:
            raise RuntimeError(f"Maximum input length ({longest}) + maximum new tokens "
                               f"({max_new_tokens}) exceeds the engine or specified limit "
                               f"({self.max_seq_len})")
        if num_beams > self.max_beam_width:
            raise RuntimeError(f"Num beams ({num_beams}) exceeds the engine or specified limit "
                               f"({self.max_beam_width})")

    def _outputs(self, ids: list[list[int]], *, max_new_tokens: int, end_id: int, num_beams: int,
                 return_dict: bool, output_sequence_lengths: bool) -> Any:
        output_ids = torch.full((len(ids), num_beams, self.max_seq_len), end_id, dtype=torch.int32)
        lengths = torch.zeros((len(ids), num_beams), dtype=torch.int32)
        for i, prompt in enumerate(ids):
            for k in range(num_beams):
                gen = continuation(prompt, k, max_new_tokens, end_id)
                if RECORDER.corrupt_from is not None and i >= RECORDER.corrupt_from:
                    gen = _garbage(len(gen))
                seq = prompt + gen
                output_ids[i, k, :len(seq)] = torch.tensor(seq, dtype=torch.int32)
                lengths[i, k] = len(seq)
        if not return_dict:
            return output_ids
        out = {"output_ids": output_ids}
        if output_sequence_lengths:
            out["sequence_lengths"] = lengths
        return out


class ModelRunnerCpp(_Runner):
    """Double of tensorrt_llm.runtime.ModelRunnerCpp (keyword-only, real names)."""

    @classmethod
    def from_dir(cls, engine_dir: str, *, lora_dir: str | None = None, rank: int = 0,
                 max_batch_size: int | None = None, max_input_len: int | None = None,
                 max_output_len: int | None = None, max_beam_width: int | None = None,
                 max_attention_window_size: list[int] | None = None,
                 sink_token_length: int | None = None,
                 kv_cache_free_gpu_memory_fraction: float | None = None,
                 debug_mode: bool = False, lora_ckpt_source: str = "hf",
                 gpu_weights_percent: float = 1, enable_chunked_context: bool = False,
                 is_enc_dec: bool = False, multi_block_mode: bool = True,
                 cuda_graph_mode: bool | None = None,
                 device_ids: list[int] | None = None) -> ModelRunnerCpp:
        if not isinstance(engine_dir, str):
            raise TypeError(f"engine_dir must be a str, got {type(engine_dir).__name__}")
        limits = _limits(engine_dir)
        for name, value in (("max_batch_size", max_batch_size), ("max_beam_width", max_beam_width)):
            if value is not None:
                assert value <= limits[name]
                limits[name] = value
        RECORDER.loads.append({"runner": "ModelRunnerCpp", "engine_dir": engine_dir, "rank": rank,
                               "max_beam_width": max_beam_width})
        return cls(engine_dir, limits)

    def generate(self, batch_input_ids: list[torch.Tensor], *, position_ids: Any = None,
                 sampling_config: Any = None, lora_uids: list | None = None,
                 streaming: bool = False, stopping_criteria: Any = None,
                 max_new_tokens: int = 1, end_id: int | None = None, pad_id: int | None = None,
                 bad_words_list: Any = None, stop_words_list: Any = None,
                 return_dict: bool = False, output_sequence_lengths: bool = False,
                 output_log_probs: bool = False, output_cum_log_probs: bool = False,
                 **kwargs: Any) -> Any:
        unknown = sorted(set(kwargs) - CPP_SAMPLING)
        if unknown:
            raise TypeError(f"ModelRunnerCpp.generate() got unexpected keyword arguments {unknown}")
        if not isinstance(end_id, int) or not isinstance(pad_id, int):
            raise TypeError("end_id and pad_id must be ints")
        ids = _check_batch(batch_input_ids)
        num_beams = kwargs.get("num_beams", 1)
        RECORDER.calls.append({"runner": "ModelRunnerCpp", "ids": ids, "max_new_tokens": max_new_tokens,
                               "end_id": end_id, "pad_id": pad_id, **kwargs})
        self._check_inputs(ids, max_new_tokens, num_beams)
        return self._outputs(ids, max_new_tokens=max_new_tokens, end_id=end_id, num_beams=num_beams,
                             return_dict=return_dict, output_sequence_lengths=output_sequence_lengths)


class ModelRunner(_Runner):
    """Double of tensorrt_llm.runtime.ModelRunner (the Python session)."""

    @classmethod
    def from_dir(cls, engine_dir: str, *, max_output_len: int | None = None,
                 lora_dir: list[str] | None = None, rank: int = 0, debug_mode: bool = False,
                 lora_ckpt_source: str = "hf", medusa_choices: Any = None, stream: Any = None,
                 gpu_weights_percent: float = 1, enable_context_fmha_fp32_acc: bool | None = None,
                 multi_block_mode: bool | None = None) -> ModelRunner:
        if not isinstance(engine_dir, str):
            raise TypeError(f"engine_dir must be a str, got {type(engine_dir).__name__}")
        RECORDER.loads.append({"runner": "ModelRunner", "engine_dir": engine_dir, "rank": rank})
        return cls(engine_dir, _limits(engine_dir))

    def generate(self, batch_input_ids: list[torch.Tensor], position_ids: Any = None,
                 sampling_config: Any = None, prompt_table: Any = None, prompt_tasks: Any = None,
                 lora_uids: list | None = None, streaming: bool = False,
                 output_generation_logits: bool = False, stopping_criteria: Any = None,
                 logits_processor: Any = None, medusa_choices: Any = None,
                 **kwargs: Any) -> Any:
        unknown = sorted(set(kwargs) - PY_SAMPLING)
        if unknown:
            raise TypeError(f"ModelRunner.generate() got unexpected keyword arguments {unknown}")
        if not isinstance(kwargs.get("end_id"), int) or not isinstance(kwargs.get("pad_id"), int):
            raise TypeError("end_id and pad_id must be ints (SamplingConfig has no defaults)")
        ids = _check_batch(batch_input_ids)
        max_new_tokens = kwargs.get("max_new_tokens", 20)
        num_beams = kwargs.get("num_beams", 1)
        RECORDER.calls.append({"runner": "ModelRunner", "ids": ids, **kwargs})
        self._check_inputs(ids, max_new_tokens, num_beams)
        return self._outputs(ids, max_new_tokens=max_new_tokens, end_id=kwargs["end_id"],
                             num_beams=num_beams, return_dict=kwargs.get("return_dict", False),
                             output_sequence_lengths=kwargs.get("output_sequence_lengths", False))


@dataclass(kw_only=True)
class SamplingParams:
    """Double of tensorrt_llm.SamplingParams (0.15 on): keyword-only fields, real names."""

    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    n: int = 1
    best_of: int | None = None
    use_beam_search: bool = False
    top_k: int | None = None
    top_p: float | None = None
    temperature: float | None = None
    length_penalty: float | None = None
    early_stopping: int | None = None
    detokenize: bool = True

    def __post_init__(self) -> None:
        if self.best_of is not None and self.best_of < self.n:
            raise ValueError(f"best_of ({self.best_of}) must be greater than or equal to n ({self.n}).")

    @property
    def beam_width(self) -> int:
        return (self.best_of or self.n) if self.use_beam_search else 1


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


class LLM:
    """Double of tensorrt_llm.LLM (and of _tensorrt_engine.LLM for engine directories)."""

    def __init__(self, model: str, tokenizer: str | None = None, tokenizer_mode: str = "auto",
                 skip_tokenizer_init: bool = False, trust_remote_code: bool = False,
                 tensor_parallel_size: int = 1, dtype: str = "auto", revision: str | None = None,
                 tokenizer_revision: str | None = None, **kwargs: Any) -> None:
        from transformers import AutoTokenizer

        unknown = sorted(set(kwargs) - LLM_ARGS)
        if unknown:
            raise ValueError(f"Failed to parse the arguments for the LLM constructor: {unknown}")
        config = json.loads((Path(model) / "config.json").read_text())
        self.is_engine = "build_config" in config
        self.max_beam_width = (_limits(model)["max_beam_width"] if self.is_engine
                               else kwargs.get("max_beam_width", 1))
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer or model,
                                                       trust_remote_code=trust_remote_code)
        RECORDER.loads.append({"runner": type(self).__module__ + ".LLM", "model": model,
                               "tokenizer": tokenizer, "trust_remote_code": trust_remote_code,
                               **kwargs})
        self._next_id = 0

    def generate(self, inputs: Any, sampling_params: Any = None, use_tqdm: bool = True,
                 lora_request: Any = None, prompt_adapter_request: Any = None,
                 queries: Any = None, kv_cache_retention_config: Any = None,
                 disaggregated_params: Any = None) -> Any:
        if not isinstance(sampling_params, SamplingParams):
            raise TypeError(f"The sampling_params must be type SamplingParams or None, but got "
                            f"{type(sampling_params)}")
        batch = inputs if isinstance(inputs, list) else [inputs]
        if not all(isinstance(p, str) for p in batch):
            raise TypeError("this double takes prompt strings")
        sp = sampling_params
        RECORDER.calls.append({"runner": "LLM", "prompts": list(batch), "sampling_params": sp,
                               "use_tqdm": use_tqdm})
        outs = []
        for position, prompt in enumerate(batch):
            if self.is_engine and sp.beam_width > self.max_beam_width:
                raise ValueError(f"sampling_params's beam_width ({sp.beam_width}) should not exceed "
                                 f"max_beam_width ({self.max_beam_width})")
            if not self.is_engine and sp.beam_width != self.max_beam_width:
                raise AssertionError(f"Request beam width {sp.beam_width} is not equal to "
                                     f"max_beam_width {self.max_beam_width}. This is not supported!")
            ids = self.tokenizer(prompt)["input_ids"]
            completions = []
            for k in range(sp.n):
                gen = continuation(ids, k, sp.max_tokens, sp.end_id)
                if RECORDER.corrupt_from is not None and position >= RECORDER.corrupt_from:
                    gen = [t for t in _garbage(len(gen)) if t >= 0]
                completions.append(CompletionOutput(
                    index=k, text=self.tokenizer.decode(gen, skip_special_tokens=True), token_ids=gen))
            outs.append(RequestOutput(request_id=self._next_id, prompt=prompt, prompt_token_ids=ids,
                                      outputs=completions))
            self._next_id += 1
        return outs if isinstance(inputs, list) else outs[0]

    def shutdown(self) -> None:
        RECORDER.shutdowns += 1


def mpi_rank() -> int:
    return 0


def install(monkeypatch: Any, *, version: str = VERSION, engine_llm_module: bool = True) -> Recorder:
    """Put the double into sys.modules as ``tensorrt_llm``; returns a fresh Recorder."""
    global RECORDER
    RECORDER = Recorder()
    pkg = types.ModuleType("tensorrt_llm")
    pkg.__doc__ = "TEST DOUBLE of tensorrt_llm (tests/doubles/tensorrt_llm_double.py)"
    pkg.__path__ = []  # a package, so submodules import
    pkg.__version__ = version
    pkg.LLM, pkg.SamplingParams, pkg.mpi_rank = LLM, SamplingParams, mpi_rank
    runtime = types.ModuleType("tensorrt_llm.runtime")
    runtime.ModelRunnerCpp, runtime.ModelRunner = ModelRunnerCpp, ModelRunner
    pkg.runtime = runtime
    monkeypatch.setitem(sys.modules, "tensorrt_llm", pkg)
    monkeypatch.setitem(sys.modules, "tensorrt_llm.runtime", runtime)
    if engine_llm_module:
        engine_mod = types.ModuleType("tensorrt_llm._tensorrt_engine")
        engine_llm = type("LLM", (LLM,), {"__module__": "tensorrt_llm._tensorrt_engine",
                                          "__doc__": "Double of _tensorrt_engine.LLM"})
        engine_mod.LLM = engine_llm
        monkeypatch.setitem(sys.modules, "tensorrt_llm._tensorrt_engine", engine_mod)
    else:
        monkeypatch.setitem(sys.modules, "tensorrt_llm._tensorrt_engine", None)
    return RECORDER


# --- scaffolding for the tests (not part of the double) -------------------------------------

REPO = Path(__file__).resolve().parents[2]
SAMPLE_CONFIG = REPO / "tests" / "data" / "configs" / "unified_0.13_llama2.json"
BUNDLED_MODEL = REPO / "harness" / "bundled" / "model"


def make_engine_dir(path: Path, *, max_beam_width: int = 1, max_batch_size: int = 256,
                    with_tokenizer: bool = False) -> Path:
    """A TensorRT-LLM engine directory: a real 0.13 unified config.json (limits adjusted),
    a stand-in ``rank0.engine`` and, optionally, the bundled model's tokenizer files."""
    path.mkdir(parents=True, exist_ok=True)
    config = json.loads(SAMPLE_CONFIG.read_text())
    config["build_config"]["max_beam_width"] = max_beam_width
    config["build_config"]["max_batch_size"] = max_batch_size
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "rank0.engine").write_bytes(b"serialized engine stand-in for the test double\n")
    if with_tokenizer:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (path / name).write_bytes((BUNDLED_MODEL / name).read_bytes())
    return path
