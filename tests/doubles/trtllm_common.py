"""What the per-release TEST DOUBLES of ``tensorrt_llm`` share: only what is the same on every
line they model. None of this is TensorRT-LLM; each line's own module says where its
behaviour was read from.

Shared because it is identical in the source of every line modelled:

- the four input checks and their texts (``ModelRunnerMixin._check_inputs`` in
  ``tensorrt_llm/runtime/model_runner.py`` @v0.9.0, ``ModelRunnerCpp._check_inputs`` in
  ``model_runner_cpp.py`` @0.13.0.dev2024082000, @v0.15.0 8f91cff, @v0.16.0 42a7b09);
- the result layout of ``generate(..., return_dict=True, output_sequence_lengths=True)``: int32
  ``output_ids`` with the prompt included and end_id padding, ``sequence_lengths`` counting
  the prompt; only the beam dimension differs by line (the caller passes its width);
- the LLM API's ``RequestOutput.outputs[k].index/.text/.token_ids`` (``llmapi/llm.py``
  @v0.16.0 and the 1.x ``llm.py``);
- the decoder's beam-width rule (``decoder_refusal``): ``cpp/tensorrt_llm/layers/
  dynamicDecodeLayer.cpp`` l.243-245 @v0.9.0 (250d9c29) and l.111-124 @0.13.0.dev2024082000
  (04c5298): a decoder configured with width 1 takes only 1; configured with W > 1, only
  2..W; ``TLLM_CHECK_WITH_INFO`` throws ``TllmException`` (a ``std::runtime_error``,
  ``common/tllmException.h`` l.32 @v0.9.0) with "[TensorRT-LLM][ERROR] Assertion failed: "
  (``common/assert.h`` l.26-29), a RuntimeError in Python;
- the Python session's decoder: ``GenerationSession.__init__`` creates ``DynamicDecodeOp`` once
  (``runtime/generation.py`` l.547 @v0.9.0, l.772 @0.13.0.dev) with no mode
  (``thop/dynamicDecodeOp.cpp`` l.51 @v0.9.0); its first ``decode()`` (``setup`` l.987-993,
  called from l.2855 @v0.9.0) fixes the width, later calls meet the rule above. Not read at
  0.15/0.16/1.x: assumed unchanged there;
- a GPU that holds one engine (``Gpu``): a runner's weights and KV cache stay allocated until it
  is shut down (the Executor's ``shutdown()``, ``pybind/executor/executor.cpp`` l.72-87
  @0.13.0.dev) or, with no shutdown (0.9's ``GptSession``: none in ``gptSession.cpp``; the
  Python session: ``_Runtime.__del__`` frees, ``generation.py`` l.286-291 @v0.9.0), released;
  the KV cache takes 90% of the memory free at load (``kDefaultGpuMemFraction``,
  ``batch_manager/kvCacheConfig.h`` l.71 @v0.9.0). A load while another engine holds the GPU
  fails: the real failure (out of memory, or a KV cache too small for one sequence) is not
  recorded verbatim; the text here is marked TEST DOUBLE.

Test scaffolding (not a model of anything): the deterministic "model" ``continuation``, the
``Recorder`` of calls, engine folders for the tests, and installing modules in sys.modules.
"""

from __future__ import annotations

import json
import sys
import types
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests" / "data" / "configs"
BUNDLED_MODEL = REPO / "harness" / "bundled" / "model"


class Gpu:
    """TEST DOUBLE of one GPU with room for one engine (see the module docstring)."""

    def __init__(self) -> None:
        self._held: list[weakref.ref[Any]] = []
        self.loads = 0

    def claim(self, holder: Any) -> None:
        """``holder`` (with ``holds_gpu()``) takes the GPU; RuntimeError while another holds it."""
        live = [ref for ref in self._held if ref() is not None]
        if any(ref().holds_gpu() for ref in live):  # type: ignore[union-attr]
            raise RuntimeError(
                "[TensorRT-LLM][ERROR] CUDA runtime error in cudaMalloc: out of "
                "memory (TEST DOUBLE: another engine still holds this GPU)"
            )
        self._held = [*live, weakref.ref(holder)]
        self.loads += 1

    def engines(self) -> int:
        """How many engines hold the GPU now."""
        return sum(1 for ref in self._held if (h := ref()) is not None and h.holds_gpu())


def decoder_refusal(configured: int, beams: int) -> str | None:
    """The decoder's beam-width check (dynamicDecodeLayer.cpp, see the module docstring)."""
    if (configured == 1 and beams == 1) or (configured > 1 and 1 < beams <= configured):
        return None
    return (
        f"[TensorRT-LLM][ERROR] Assertion failed: Decoder is configured with beam width "
        f"{configured}, but {beams} was given"
    )


@dataclass
class Recorder:
    """What the adapters did to a double."""

    loads: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # keywords a real runner drops silently
    shutdowns: int = 0
    corrupt_from: int | None = None  # batch position from which outputs are garbage (#2072)
    gpu: Gpu = field(default_factory=Gpu)


RECORDER = Recorder()


def recorder() -> Recorder:
    """The Recorder of the double installed last."""
    return RECORDER


def fresh_recorder() -> Recorder:
    global RECORDER
    RECORDER = Recorder()
    return RECORDER


# --- the double's "model" -------------------------------------------------------------------


def continuation(prompt: list[int], beam: int, max_new_tokens: int, end_id: int) -> list[int]:
    """A prompt- and beam-dependent slice of the prompt's own ids (3 to 11 tokens, never end_id)."""
    source = [t for t in prompt if t != end_id] or [0]
    length = min(max_new_tokens, 3 + (len(prompt) + 3 * beam) % 9)
    return [source[(2 * beam + 1 + j) % len(source)] for j in range(length)]


def generated(prompt: list[int], beam: int, max_new_tokens: int, end_id: int, position: int) -> list[int]:
    """The tokens request ``position`` gets for ``beam``; -1 then garbage past ``corrupt_from``."""
    gen = continuation(prompt, beam, max_new_tokens, end_id)
    if RECORDER.corrupt_from is not None and position >= RECORDER.corrupt_from:
        gen = [-1] + [7 + (13 * j) % 50 for j in range(max(len(gen) - 1, 0))]
    return gen


# --- runner inputs and outputs ----------------------------------------------------------------


def token_lists(batch_input_ids: Any) -> list[list[int]]:
    """``batch_input_ids`` as lists; TypeError unless a non-empty list of 1-D integer tensors."""
    if not isinstance(batch_input_ids, list) or not batch_input_ids:
        raise TypeError(
            f"batch_input_ids must be a non-empty list of torch.Tensor, got {type(batch_input_ids).__name__}"
        )
    out = []
    for t in batch_input_ids:
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.numel() == 0:
            raise TypeError("each batch_input_ids entry must be a non-empty 1-D torch.Tensor")
        if t.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"batch_input_ids tensors must hold token ids, got {t.dtype}")
        out.append([int(x) for x in t.tolist()])
    return out


@dataclass
class Limits:
    """A runner's limits, from the engine or from the from_dir arguments."""

    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_beam_width: int


def check_inputs(limits: Limits, ids: list[list[int]], max_new_tokens: int, beams: int) -> None:
    """The runners' input checks, in their order and words (RuntimeError)."""
    if len(ids) > limits.max_batch_size:
        raise RuntimeError(
            f"Input batch size ({len(ids)}) exceeds the engine or specified limit ({limits.max_batch_size})"
        )
    longest = max(len(x) for x in ids)
    if longest > limits.max_input_len:
        raise RuntimeError(
            f"Maximum input length ({longest}) exceeds the engine or specified limit ({limits.max_input_len})"
        )
    if longest + max_new_tokens > limits.max_seq_len:
        raise RuntimeError(
            f"Maximum input length ({longest}) + maximum new tokens ({max_new_tokens}) "
            f"exceeds the engine or specified limit ({limits.max_seq_len})"
        )
    if beams > limits.max_beam_width:
        raise RuntimeError(
            f"Num beams ({beams}) exceeds the engine or specified limit ({limits.max_beam_width})"
        )


def pack(
    ids: list[list[int]],
    *,
    beams: int,
    width: int,
    seq_len: int,
    end_id: int,
    max_new_tokens: int,
    return_dict: bool,
    output_sequence_lengths: bool,
) -> Any:
    """``output_ids`` [batch, width, seq_len] and ``sequence_lengths`` [batch, width]; beams at
    and past ``beams`` stay empty (length 0), as in the lines whose width is the executor's."""
    output_ids = torch.full((len(ids), width, seq_len), end_id, dtype=torch.int32)
    lengths = torch.zeros((len(ids), width), dtype=torch.int32)
    for i, prompt in enumerate(ids):
        for k in range(beams):
            seq = prompt + generated(prompt, k, max_new_tokens, end_id, i)
            output_ids[i, k, : len(seq)] = torch.tensor(seq, dtype=torch.int32)
            lengths[i, k] = len(seq)
    if not return_dict:
        return output_ids
    out = {"output_ids": output_ids}
    if output_sequence_lengths:
        out["sequence_lengths"] = lengths
    return out


def unified_build_config(engine_dir: str) -> dict[str, Any]:
    """``build_config`` of a unified config.json (``json.at("build_config")`` in GptJsonConfig:
    a missing key is nlohmann's out_of_range, surfacing as RuntimeError)."""
    config = json.loads((Path(engine_dir) / "config.json").read_text())
    if "build_config" not in config:
        raise RuntimeError("[json.exception.out_of_range.403] key 'build_config' not found")
    return config["build_config"]


def record_load(runner: str, **values: Any) -> None:
    RECORDER.loads.append({"runner": runner, **values})


def record_ignored(kwargs: dict[str, Any], accepted: frozenset[str]) -> None:
    RECORDER.ignored.extend(sorted(set(kwargs) - accepted))


# --- LLM API results (the same shape on 0.15/0.16 and 1.x) --------------------------------------


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


def request_output(
    tokenizer: Any, request_id: int, prompt: str, position: int, *, n: int, max_tokens: int, end_id: int
) -> RequestOutput:
    """One finished request with ``n`` outputs, text decoded by the LLM's tokenizer."""
    ids = tokenizer(prompt)["input_ids"]
    outputs = []
    for k in range(n):
        gen = [t for t in generated(ids, k, max_tokens, end_id, position) if t >= 0]
        outputs.append(
            CompletionOutput(index=k, text=tokenizer.decode(gen, skip_special_tokens=True), token_ids=gen)
        )
    return RequestOutput(request_id=request_id, prompt=prompt, prompt_token_ids=ids, outputs=outputs)


def hf_tokenizer(folder: str, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)


# --- packages in sys.modules ------------------------------------------------------------------


def module(name: str, doc: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__doc__ = doc
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


def install_modules(monkeypatch: Any, modules: dict[str, types.ModuleType | None]) -> Recorder:
    """Put ``modules`` into sys.modules (None marks a module the line does not have)."""
    for prefix in [
        name for name in sys.modules if name == "tensorrt_llm" or name.startswith("tensorrt_llm.")
    ]:
        if prefix not in modules:
            monkeypatch.setitem(sys.modules, prefix, None)
    for name, mod in modules.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return fresh_recorder()


# --- engine folders for the tests ---------------------------------------------------------------


def _tokenizer_files(path: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (path / name).write_bytes((BUNDLED_MODEL / name).read_bytes())


def make_engine_dir(
    path: Path,
    *,
    version: str = "0.13.0",
    max_beam_width: int = 1,
    max_batch_size: int = 256,
    with_tokenizer: bool = False,
    sample: str = "unified_0.13_llama2.json",
) -> Path:
    """A unified engine directory: a real config.json (version and limits set), a stand-in
    ``rank0.engine`` and, optionally, the bundled model's tokenizer files."""
    path.mkdir(parents=True, exist_ok=True)
    config = json.loads((CONFIGS / sample).read_text())
    config["version"] = version
    config["build_config"].update(max_beam_width=max_beam_width, max_batch_size=max_batch_size)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "rank0.engine").write_bytes(b"serialized engine stand-in for the test double\n")
    if with_tokenizer:
        _tokenizer_files(path)
    return path


def make_legacy_engine_dir(
    path: Path, *, max_beam_width: int | None = 1, max_batch_size: int = 16, with_tokenizer: bool = False
) -> Path:
    """A legacy (0.5-0.8 ``build.py``) engine directory: a real 0.7 config.json and the engine
    file named ``{name}_{precision}_tp{tp}_rank0.engine`` as those builders wrote it."""
    path.mkdir(parents=True, exist_ok=True)
    config = json.loads((CONFIGS / "legacy_0.7_llama_sq_int8kv.json").read_text())
    builder = config["builder_config"]
    builder["max_batch_size"] = max_batch_size
    if max_beam_width is None:
        builder.pop("max_beam_width", None)
    else:
        builder["max_beam_width"] = max_beam_width
    (path / "config.json").write_text(json.dumps(config, indent=2))
    name = f"{builder['name']}_{builder['precision']}_tp{builder['tensor_parallel']}_rank0.engine"
    (path / name).write_bytes(b"serialized legacy engine stand-in for the test double\n")
    if with_tokenizer:
        _tokenizer_files(path)
    return path


# --- runners that several lines implement the same way ------------------------------------------


class Executor:
    """Stand-in for ``tensorrt_llm.bindings.executor.Executor`` (``ModelRunnerCpp.session`` from
    0.10 on): only what the runner uses, plus ``shutdown()``."""

    def __init__(self, max_beam_width: int) -> None:
        self.max_beam_width = max_beam_width
        self.alive = True
        RECORDER.gpu.claim(self)

    def holds_gpu(self) -> bool:
        return self.alive

    def can_enqueue_requests(self) -> bool:
        return True  # the leader (rank 0) process

    def shutdown(self) -> None:
        self.alive = False
        RECORDER.shutdowns += 1


class ExecutorRunner:
    """What ``ModelRunnerCpp`` on the Executor does the same way on 0.13.0.dev, 0.15, 0.16
    (``model_runner_cpp.py``): limits from the unified config (``max_seq_len`` from build_config),
    ``assert`` on runtime limits above the engine's, the sampling keywords filtered through
    ``accepted_parameters`` (others dropped silently), ``num_beams`` renamed to ``beam_width``,
    ``_check_inputs``, and a response error raised as ``RuntimeError(response.error_msg)``.
    A line sets ``ACCEPTED``, ``width`` (the output's beam dimension) and ``refusal``."""

    ACCEPTED: frozenset[str] = frozenset()
    NAME = "ModelRunnerCpp"
    EXECUTOR_ATTR = "session"  # where the runner keeps its Executor (1.x: "executor")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.max_beam_width = limits.max_beam_width
        setattr(self, self.EXECUTOR_ATTR, Executor(limits.max_beam_width))

    @property
    def executor_(self) -> Executor:
        executor: Executor = getattr(self, self.EXECUTOR_ATTR)
        return executor

    @classmethod
    def load(
        cls,
        engine_dir: str,
        rank: int,
        max_batch_size: int | None,
        max_beam_width: int | None,
        **recorded: Any,
    ) -> ExecutorRunner:
        if not isinstance(engine_dir, str):
            raise TypeError(f"engine_dir must be a str, got {type(engine_dir).__name__}")
        build = unified_build_config(engine_dir)
        limits = Limits(
            max_batch_size=build["max_batch_size"],
            max_input_len=build["max_input_len"],
            max_seq_len=build["max_seq_len"],
            max_beam_width=build["max_beam_width"],
        )
        if max_batch_size is not None:
            assert max_batch_size <= limits.max_batch_size
            limits.max_batch_size = max_batch_size
        if max_beam_width is not None:
            assert max_beam_width <= limits.max_beam_width
            limits.max_beam_width = max_beam_width
        runner = cls(limits)
        record_load(cls.NAME, engine_dir=engine_dir, rank=rank, max_beam_width=max_beam_width, **recorded)
        return runner

    def width(self, beams: int) -> int:
        return beams

    def refusal(self, beams: int) -> str | None:
        """The executor's error for a request of ``beams`` beams, if it refuses it."""
        return None

    def run(
        self,
        batch_input_ids: Any,
        *,
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
        record_ignored(kwargs, self.ACCEPTED)
        ids = token_lists(batch_input_ids)
        RECORDER.calls.append(
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
        check_inputs(self.limits, ids, max_new_tokens, beams)
        error = self.refusal(beams)
        if error is not None:
            raise RuntimeError(error)
        return pack(
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


def first_call_decoder(runner: Any, beams: int) -> None:
    """The Python session's decoder: the first call's width configures it, later calls meet
    ``decoder_refusal`` (RuntimeError)."""
    if runner.decoder_width is None:
        runner.decoder_width = beams
    error = decoder_refusal(runner.decoder_width, beams)
    if error is not None:
        raise RuntimeError(error)


class SessionRunner:
    """``ModelRunner`` (the Python GenerationSession) as 0.13.0.dev and later lines share it:
    limits from build_config (``max_seq_len``), kwargs into ``SamplingConfig.update`` (unknown
    keys dropped), ``_check_inputs``, output ``[batch, num_beams, longest prompt + max_new_tokens]``."""

    FIELDS: frozenset[str] = frozenset()

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.max_beam_width = limits.max_beam_width
        self.decoder_width: int | None = None  # fixed by the first call
        RECORDER.gpu.claim(self)

    def holds_gpu(self) -> bool:
        return True  # until released

    @classmethod
    def load(cls, engine_dir: str, rank: int) -> SessionRunner:
        if not isinstance(engine_dir, str):
            raise TypeError(f"engine_dir must be a str, got {type(engine_dir).__name__}")
        build = unified_build_config(engine_dir)
        runner = cls(
            Limits(
                max_batch_size=build["max_batch_size"],
                max_input_len=build["max_input_len"],
                max_seq_len=build["max_seq_len"],
                max_beam_width=build["max_beam_width"],
            )
        )
        record_load("ModelRunner", engine_dir=engine_dir, rank=rank)
        return runner

    def run(self, batch_input_ids: Any, kwargs: dict[str, Any]) -> Any:
        record_ignored(kwargs, self.FIELDS)
        values = {
            "max_new_tokens": 20,
            "num_beams": 1,
            "end_id": None,
            "return_dict": False,
            "output_sequence_lengths": False,
            **{k: v for k, v in kwargs.items() if k in self.FIELDS},
        }
        ids = token_lists(batch_input_ids)
        RECORDER.calls.append({"runner": "ModelRunner", "ids": ids, **kwargs})
        check_inputs(self.limits, ids, values["max_new_tokens"], values["num_beams"])
        first_call_decoder(self, values["num_beams"])
        return pack(
            ids,
            beams=values["num_beams"],
            width=values["num_beams"],
            seq_len=max(len(x) for x in ids) + values["max_new_tokens"],
            end_id=values["end_id"],
            max_new_tokens=values["max_new_tokens"],
            return_dict=values["return_dict"],
            output_sequence_lengths=values["output_sequence_lengths"],
        )
