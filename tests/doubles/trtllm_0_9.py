"""TEST DOUBLE of ``tensorrt_llm`` 0.9.0: it is NOT TensorRT-LLM and runs no model.

Read from the v0.9.0 tag (commit 250d9c29, WhiteD2125/TensorRT-LLM, a fork that carries the
release tags); every behaviour below is from that one release:

- ``tensorrt_llm/version.py``: ``__version__ = "0.9.0"``; ``tensorrt_llm/__init__.py`` exports
  ``mpi_rank`` and ``LLM`` (``hlapi/llm.py``: ``LLM(config: ModelConfig, *, tokenizer=None,
  kv_cache_config=None, streaming_llm=False, async_engine_tmp_dir=None, **_additional_options)``)
  and no ``SamplingParams`` (the LLM API has no beam-search sampling parameters in 0.9).
- ``runtime/model_runner_cpp.py`` ``ModelRunnerCpp.from_dir(engine_dir, lora_dir=None, rank=0,
  max_batch_size=None, max_input_len=None, max_output_len=None, max_beam_width=None,
  max_attention_window_size=None, sink_token_length=None, free_gpu_memory_fraction=None,
  debug_mode=False, lora_ckpt_source="hf")``: positional-or-keyword; wraps ``GptSession``;
  ``assert max_beam_width <= model_config.max_beam_width`` (likewise batch size).
  The config is parsed by ``cpp/tensorrt_llm/runtime/gptJsonConfig.cpp`` ``parseJson``: no
  ``version`` key means the legacy (0.5-0.8) layout (``builder_config``/``plugin_config``), the
  engine file is then ``{name}_{precision}_tp{tp}[_pp{pp}]_rank{r}.engine`` (``engineFilename``),
  else ``rank{r}.engine``; ``parseBuilderConfig``: max_seq_len = max_input_len +
  max_output_len, a missing ``max_beam_width`` reads as 0 (``parseJsonFieldOr``).
- ``ModelRunnerCpp.generate(batch_input_ids, sampling_config=None, prompt_table_path=None,
  prompt_tasks=None, lora_uids=None, streaming=False, stopping_criteria=None,
  logits_processor=None, **kwargs)``: kwargs go through ``SamplingConfig.update`` (``generation.py``),
  which sets known fields and silently drops the rest (recorded here in ``Recorder.ignored``);
  ``_check_inputs`` (``model_runner.py`` ``ModelRunnerMixin``) then ``GptSession.generate`` into
  ``output_ids`` of shape ``(batch, sampling_config.num_beams, max_sequence_length)``.
- ``runtime/model_runner.py`` ``ModelRunner.from_dir(engine_dir, lora_dir=None, rank=0,
  debug_mode=False, lora_ckpt_source="hf", medusa_choices=None, stream=None)``: the legacy path
  (``get_engine_version`` is None) reads ``builder_config['max_beam_width']`` and
  ``plugin_config['mamba_conv1d_plugin']``/``['paged_state']`` by key (``_builder_to_model_config``),
  so a real 0.5-0.8 config, which has neither plugin key, fails with KeyError there; the
  unified path takes max_seq_len = max_input_len + max_output_len from build_config.
- ``SamplingConfig`` (``generation.py``) defaults: ``max_new_tokens=20, num_beams=1, top_k=1``,
  ``length_penalty=1.0, early_stopping=1``.

- The decoder (tests/doubles/trtllm_common.py has the rule and its lines):
  ``cpp/tensorrt_llm/runtime/gptSession.cpp`` l.297-301 creates the session's decoder in
  TopKTopP mode when ``maxBeamWidth == 1``, BeamSearch otherwise, configured with the session's
  ``max_beam_width`` (``dynamicDecodeLayer.cpp`` l.144-148): a ``ModelRunnerCpp`` loaded at an
  engine's width 4 refuses greedy requests ("Decoder is configured with beam width 4, but 1 was
  given"); ``from_dir(max_beam_width=W)`` (``model_runner_cpp.py`` l.90, asserted l.149-152,
  passed to ``GptSessionConfig`` l.166-168) sets W. The Python ``ModelRunner`` is configured by
  its first call; ``ModelRunner.from_dir`` takes no beam width (``model_runner.py`` l.450-457).
- Memory: ``GptSession`` has no ``shutdown()`` (none in ``gptSession.cpp``); it is allocated at
  construction (l.95) and freed when released: a second runner loaded while one is referenced
  fails here (``trtllm_common.Gpu``).
- KV-cache block reuse: ``GptSession`` hard-codes it off (``bool constexpr enableBlockReuse{false}``,
  ``gptSession.cpp`` l.191); ``ModelRunnerCpp.from_dir`` has no ``kv_cache_enable_block_reuse``.

Not modelled: padding of ``output_ids`` past each sequence (end_id here; GptSession's fill is
not read), the MPI world-size assertion, LoRA, streaming, the hlapi ``LLM`` beyond its signature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.doubles import trtllm_common as common
from tests.doubles import trtllm_runners as runners
from tests.doubles.signatures import Args, takes
from tests.doubles.trtllm_common import Limits

VERSION = "0.9.0"
LINE = "0.9"

# tensorrt_llm.runtime.SamplingConfig fields at v0.9.0 (generation.py): no no_repeat_ngram_size yet
SAMPLING_FIELDS = runners.SAMPLING_CONFIG_FIELDS - {"no_repeat_ngram_size"}
SAMPLING_DEFAULTS = {
    "end_id": None,
    "pad_id": None,
    "max_new_tokens": 20,
    "num_beams": 1,
    "top_k": 1,
    "output_sequence_lengths": False,
    "return_dict": False,
}


def _cpp_limits(config: dict[str, Any]) -> tuple[Limits, str]:
    """GptJsonConfig::parseJson: limits and the engine file name for rank 0."""
    legacy = "version" not in config
    build = config["builder_config"] if legacy else config["build_config"]
    limits = Limits(
        max_batch_size=build.get("max_batch_size", 0),
        max_input_len=build.get("max_input_len", 0),
        max_seq_len=build.get("max_input_len", 0) + build.get("max_output_len", 0),
        max_beam_width=build.get("max_beam_width", 0),
    )
    if not legacy:
        return limits, "rank0.engine"
    pp = build.get("pipeline_parallel", 1)
    pp_part = f"_pp{pp}" if pp > 1 else ""
    return limits, f"{build['name']}_{build['precision']}_tp{build['tensor_parallel']}{pp_part}_rank0.engine"


def _python_limits(config: dict[str, Any]) -> Limits:
    """ModelRunner.from_dir: by key, as _builder_to_model_config and from_engine read them."""
    if "version" not in config:
        build, plugin = config["builder_config"], config["plugin_config"]
        plugin["mamba_conv1d_plugin"], plugin["paged_state"]  # noqa: B018  KeyError on 0.5-0.8 configs
    else:
        build = config["build_config"]
    return Limits(
        max_batch_size=build["max_batch_size"],
        max_input_len=build["max_input_len"],
        max_seq_len=build["max_input_len"] + build["max_output_len"],
        max_beam_width=build["max_beam_width"],
    )


class SamplingConfig:
    """Double of tensorrt_llm.runtime.SamplingConfig 0.9 (``update`` drops unknown keys)."""

    end_id: int | None
    pad_id: int | None
    max_new_tokens: int
    num_beams: int
    return_dict: bool
    output_sequence_lengths: bool

    def __init__(self, end_id: int | None, pad_id: int | None, **values: Any) -> None:
        for key, default in SAMPLING_DEFAULTS.items():
            setattr(self, key, default)
        self.end_id, self.pad_id = end_id, pad_id
        self.length_penalty, self.early_stopping = 1.0, 1
        self.update(**values)

    def update(self, **kwargs: Any) -> dict[str, Any]:
        unused = {k: v for k, v in kwargs.items() if k not in SAMPLING_FIELDS}
        for key, value in kwargs.items():
            if key in SAMPLING_FIELDS:
                setattr(self, key, value)
        common.RECORDER.ignored.extend(sorted(unused))
        return unused


class _Runner:
    def __init__(self, name: str, limits: Limits) -> None:
        self.name, self.limits = name, limits
        self.max_beam_width = limits.max_beam_width
        self.decoder_width: int | None = None
        common.RECORDER.gpu.claim(self)

    def holds_gpu(self) -> bool:
        return True  # no shutdown(): until the object is released

    def decode(self, beams: int) -> None:
        common.first_call_decoder(self, beams)

    def _generate(
        self, batch_input_ids: Any, sampling_config: Any, kwargs: dict[str, Any], seq_len: int | None
    ) -> Any:
        sc: SamplingConfig = (
            SamplingConfig(end_id=None, pad_id=None) if sampling_config is None else sampling_config
        )
        sc.update(**kwargs)
        ids = common.token_lists(batch_input_ids)
        common.RECORDER.calls.append({"runner": self.name, "ids": ids, **kwargs})
        common.check_inputs(self.limits, ids, sc.max_new_tokens, sc.num_beams)
        self.decode(sc.num_beams)
        width = max(len(x) for x in ids) + sc.max_new_tokens if seq_len is None else seq_len
        assert sc.end_id is not None  # the output's padding (the harness passes end_id)
        return common.pack(
            ids,
            beams=sc.num_beams,
            width=sc.num_beams,
            seq_len=width,
            end_id=sc.end_id,
            max_new_tokens=sc.max_new_tokens,
            return_dict=sc.return_dict,
            output_sequence_lengths=sc.output_sequence_lengths,
        )


class ModelRunnerCpp(_Runner):
    """Double of tensorrt_llm.runtime.ModelRunnerCpp 0.9 (GptSession)."""

    @classmethod
    @takes("""engine_dir, lora_dir=None, rank=0, max_batch_size=None, max_input_len=None, max_output_len=None,
        max_beam_width=None, max_attention_window_size=None, sink_token_length=None,
        free_gpu_memory_fraction=None, debug_mode=False, lora_ckpt_source='hf'""")
    def from_dir(cls, a: Args) -> ModelRunnerCpp:
        engine_dir, max_beam_width = a["engine_dir"], a["max_beam_width"]
        limits, engine_file = _cpp_limits(common.engine_config(engine_dir))
        if not (Path(engine_dir) / engine_file).is_file():
            raise RuntimeError(f"Failed to open engine file {Path(engine_dir) / engine_file}")
        limits.lower("max_beam_width", max_beam_width)
        limits.lower("max_batch_size", a["max_batch_size"])
        runner = cls("ModelRunnerCpp", limits)
        runner.decoder_width = limits.max_beam_width  # fixed at load: gptSession.cpp l.297-301
        common.record_load(
            "ModelRunnerCpp", engine_dir=engine_dir, rank=a["rank"], max_beam_width=max_beam_width
        )
        return runner

    @takes("""batch_input_ids, sampling_config=None, prompt_table_path=None, prompt_tasks=None,
        lora_uids=None, streaming=False, stopping_criteria=None, logits_processor=None, **kwargs""")
    def generate(self, a: Args) -> Any:
        return self._generate(
            a["batch_input_ids"], a["sampling_config"], a["kwargs"], self.limits.max_seq_len
        )


class ModelRunner(_Runner):
    """Double of tensorrt_llm.runtime.ModelRunner 0.9 (the Python GenerationSession)."""

    @classmethod
    @takes("""engine_dir, lora_dir=None, rank=0, debug_mode=False, lora_ckpt_source='hf', medusa_choices=None,
        stream=None""")
    def from_dir(cls, a: Args) -> ModelRunner:
        runner = cls("ModelRunner", _python_limits(common.engine_config(a["engine_dir"])))
        common.record_load("ModelRunner", engine_dir=a["engine_dir"], rank=a["rank"])
        return runner

    @takes("""batch_input_ids, sampling_config=None, prompt_table_path=None, prompt_tasks=None,
        lora_uids=None, streaming=False, stopping_criteria=None, logits_processor=None, medusa_choices=None,
        **kwargs""")
    def generate(self, a: Args) -> Any:
        return self._generate(a["batch_input_ids"], a["sampling_config"], a["kwargs"], None)


class LLM:
    """Double of the 0.9 hlapi ``LLM`` signature only (``config`` is a required ModelConfig)."""

    @takes("""config, *, tokenizer=None, kv_cache_config=None, streaming_llm=False, async_engine_tmp_dir=None,
        **_additional_options""")
    def __init__(self, a: Args) -> None:
        raise NotImplementedError("TEST DOUBLE: the 0.9 hlapi LLM is not modelled beyond its signature")


def install(monkeypatch: pytest.MonkeyPatch) -> common.Recorder:
    """Put this double into sys.modules as ``tensorrt_llm`` 0.9.0; returns a fresh Recorder."""
    runtime = {"ModelRunner": ModelRunner, "ModelRunnerCpp": ModelRunnerCpp, "SamplingConfig": SamplingConfig}
    return common.install_line(
        monkeypatch,
        VERSION,
        "tests/doubles/trtllm_0_9.py",
        {"tensorrt_llm": {"LLM": LLM}, "tensorrt_llm.runtime": runtime},
    )


def make_engine_dir(path: Path, **kwargs: Any) -> Path:
    """An engine directory as trtllm-build 0.9 writes it (max_output_len, no max_seq_len)."""
    return common.make_engine_dir(path, version=VERSION, sample="unified_0.9_mistral_sq.json", **kwargs)
