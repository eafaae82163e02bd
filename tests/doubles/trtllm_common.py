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

The runners that several lines implement the same way are in tests/doubles/trtllm_runners.py,
the LLM API's shared pieces in tests/doubles/trtllm_llmapi.py.

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
from typing import Any, Protocol

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests" / "data" / "configs"
BUNDLED_MODEL = REPO / "harness" / "bundled" / "model"


class _Holder(Protocol):
    def holds_gpu(self) -> bool: ...


class Gpu:
    """TEST DOUBLE of one GPU with room for one engine (see the module docstring)."""

    def __init__(self) -> None:
        self._held: list[weakref.ref[_Holder]] = []
        self.loads = 0

    def claim(self, holder: _Holder) -> None:
        """``holder`` (with ``holds_gpu()``) takes the GPU; RuntimeError while another holds it."""
        live = [ref for ref in self._held if ref() is not None]
        if any(h.holds_gpu() for ref in live if (h := ref()) is not None):
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


class _FirstCallDecoder(Protocol):
    decoder_width: int | None


def first_call_decoder(runner: _FirstCallDecoder, beams: int) -> None:
    """The Python session's decoder: the first call's width configures it, later calls meet
    ``decoder_refusal`` (RuntimeError)."""
    if runner.decoder_width is None:
        runner.decoder_width = beams
    error = decoder_refusal(runner.decoder_width, beams)
    if error is not None:
        raise RuntimeError(error)


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


def continuation(prompt: list[int], beam: int, max_new_tokens: int, end_id: int | None) -> list[int]:
    """A prompt- and beam-dependent slice of the prompt's own ids (3 to 11 tokens, never end_id)."""
    source = [t for t in prompt if t != end_id] or [0]
    length = min(max_new_tokens, 3 + (len(prompt) + 3 * beam) % 9)
    return [source[(2 * beam + 1 + j) % len(source)] for j in range(length)]


def generated(
    prompt: list[int], beam: int, max_new_tokens: int, end_id: int | None, position: int
) -> list[int]:
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

    def lower(self, name: str, value: int | None) -> None:
        """A runtime limit from ``from_dir``: ``assert value <= the engine's``, then ``value``."""
        if value is not None:
            assert value <= getattr(self, name)
            setattr(self, name, value)

    @classmethod
    def unified(cls, engine_dir: str) -> Limits:
        """The limits in a unified config.json's build_config (``max_seq_len`` from there)."""
        if not isinstance(engine_dir, str):
            raise TypeError(f"engine_dir must be a str, got {type(engine_dir).__name__}")
        build = unified_build_config(engine_dir)
        return cls(
            max_batch_size=build["max_batch_size"],
            max_input_len=build["max_input_len"],
            max_seq_len=build["max_seq_len"],
            max_beam_width=build["max_beam_width"],
        )


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
    config = engine_config(engine_dir)
    if "build_config" not in config:
        raise RuntimeError("[json.exception.out_of_range.403] key 'build_config' not found")
    build: dict[str, Any] = config["build_config"]
    return build


def engine_config(engine_dir: str) -> dict[str, Any]:
    """An engine folder's config.json."""
    config: dict[str, Any] = json.loads((Path(engine_dir) / "config.json").read_text())
    return config


def record_load(runner: str, **values: Any) -> None:
    RECORDER.loads.append({"runner": runner, **values})


def record_ignored(kwargs: dict[str, Any], accepted: frozenset[str]) -> None:
    RECORDER.ignored.extend(sorted(set(kwargs) - accepted))


# --- packages in sys.modules ------------------------------------------------------------------


def module(name: str, doc: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__doc__ = doc
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


def install_modules(monkeypatch: pytest.MonkeyPatch, modules: dict[str, types.ModuleType | None]) -> Recorder:
    """Put ``modules`` into sys.modules (None marks a module the line does not have)."""
    for prefix in [
        name for name in sys.modules if name == "tensorrt_llm" or name.startswith("tensorrt_llm.")
    ]:
        if prefix not in modules:
            monkeypatch.setitem(sys.modules, prefix, None)
    for name, mod in modules.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return fresh_recorder()


def install_line(
    monkeypatch: pytest.MonkeyPatch, version: str, source: str, modules: dict[str, dict[str, Any] | None]
) -> Recorder:
    """Install the double of ``tensorrt_llm`` ``version`` (defined in ``source``): ``modules``
    maps each module's name to its attributes (None: a module the line does not have); each
    module is also an attribute of its parent package, and the package has ``__version__`` and
    ``mpi_rank``. Returns a fresh Recorder."""
    doc = f"TEST DOUBLE of tensorrt_llm {version} ({source})"
    package = {
        "__version__": version,
        "__path__": [],
        "mpi_rank": mpi_rank,
        **(modules["tensorrt_llm"] or {}),
    }
    modules = {**modules, "tensorrt_llm": package}
    built = {name: None if attrs is None else module(name, doc, **attrs) for name, attrs in modules.items()}
    for name, mod in built.items():
        parent, _, child = name.rpartition(".")
        if mod is not None and built.get(parent) is not None:
            setattr(built[parent], child, mod)
    return install_modules(monkeypatch, built)


def mpi_rank() -> int:
    """``tensorrt_llm.mpi_rank``: this process is rank 0."""
    return 0


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
