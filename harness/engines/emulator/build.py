"""``build-engine``: write an emulator engine directory from a transformers Mistral model.

The directory mirrors what ``trtllm-build --output_dir`` writes: a ``config.json`` in
TensorRT-LLM's unified layout (``version``, ``pretrained_config``, ``build_config``) plus
the weights; it also holds the tokenizer, so that the engine directory alone can run. An
extra ``emulator`` section marks it as an emulator engine.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from harness import __version__, bounds
from harness.config.basics import CACHE_FOLDER, harness_cache_dir
from harness.engines.emulator import DEFAULT_COMPUTE_DTYPE, DEFAULT_PREFILL_CHUNK
from harness.engines.emulator.drift import Drift
from harness.engines.emulator.engine import TOKENIZER_DIR, WEIGHTS_FILE
from harness.engines.emulator.faults import Fault, split_fault
from harness.errors import EngineError
from harness.model.json import Json
from harness.model.limits import EngineLimits
from harness.model.vocab import Layout
from harness.storage import confine

BUNDLED_MODEL = Path(__file__).resolve().parents[2] / "bundled" / "model"
MIMICS_VERSION = "0.13.0"  # the TensorRT-LLM release whose config layout this follows


def build_limits(
    max_batch_size: int = 8, max_beam_width: int = 4, max_input_len: int = 384, max_seq_len: int = 512
) -> EngineLimits:
    """The ``trtllm-build`` limits an emulator engine is built with (the defaults: the bundled
    engine's)."""
    emulator = EngineLimits(layout=Layout.EMULATOR, emulator=True)
    return replace(
        emulator,
        max_batch_size=max_batch_size,
        max_beam_width=max_beam_width,
        max_input_len=max_input_len,
        max_seq_len=max_seq_len,
    )


def _built(limits: EngineLimits) -> tuple[int, int, int, int]:
    """max_batch_size, max_beam_width, max_input_len and max_seq_len: what build-engine writes."""
    b, w, n, s = limits.max_batch_size, limits.max_beam_width, limits.max_input_len, limits.max_seq_len
    if b is None or w is None or n is None or s is None:
        raise EngineError("build-engine needs max_batch_size, max_beam_width, max_input_len and max_seq_len")
    return b, w, n, s


def _head_size(model_config: Mapping[str, Json], heads: Json) -> Json:
    """``head_dim``, else hidden_size // num_attention_heads (as transformers computes it)."""
    head_dim = model_config.get("head_dim")
    if head_dim:
        return head_dim
    hidden = model_config["hidden_size"]
    if not isinstance(hidden, int) or not isinstance(heads, int):
        raise EngineError(
            f"config.json: hidden_size {hidden!r} and num_attention_heads {heads!r} must be "
            "integers (or head_dim given)"
        )
    return hidden // heads


def engine_config(
    model_config: Mapping[str, Json],
    limits: EngineLimits,
    compute_dtype: str,
    fault: Fault | None = None,
    drift: Drift | None = None,
    prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
) -> dict[str, Json]:
    """config.json for an emulator engine, in TensorRT-LLM's unified layout; a fault under
    ``emulator.fault``, drift under ``emulator.drift`` (``--fault drift`` is drift alone);
    ``emulator.prefill_chunk``: the prompt tokens the in-flight path prefills per step."""
    fault, drift = split_fault(fault, drift)
    max_batch_size, max_beam_width, max_input_len, max_seq_len = _built(limits)
    heads = model_config["num_attention_heads"]
    head_size = _head_size(model_config, heads)
    return {
        "version": MIMICS_VERSION,
        "pretrained_config": {
            "architecture": "MistralForCausalLM",
            "dtype": str(model_config.get("torch_dtype") or model_config.get("dtype") or "float32"),
            "vocab_size": model_config["vocab_size"],
            "hidden_size": model_config["hidden_size"],
            "intermediate_size": model_config["intermediate_size"],
            "num_hidden_layers": model_config["num_hidden_layers"],
            "num_attention_heads": heads,
            "num_key_value_heads": model_config.get("num_key_value_heads", heads),
            "head_size": head_size,
            "max_position_embeddings": model_config.get("max_position_embeddings"),
            "rope_theta": model_config.get("rope_theta", 10000.0),
            "rms_norm_eps": model_config.get("rms_norm_eps", 1e-6),
            "hidden_act": model_config.get("hidden_act", "silu"),
            "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
            "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
        },
        "build_config": {
            "max_batch_size": max_batch_size,
            "max_beam_width": max_beam_width,
            "max_input_len": max_input_len,
            "max_seq_len": max_seq_len,
            "max_num_tokens": max_batch_size * max_input_len,
            "kv_cache_type": "CONTINUOUS",
            "plugin_config": {
                "gpt_attention_plugin": "auto",
                "paged_kv_cache": False,
                "remove_input_padding": True,
                "context_fmha": True,
            },
        },
        "emulator": {
            "format": 1,
            "built_by": f"batch-position-harness {__version__}",
            "compute_dtype": compute_dtype,
            "kv_cache": "one buffer of max_batch_size x max_beam_width beam slots; beam b of "
            "entry s in slot s * num_beams + b; no check of num_beams",
            "prefill_chunk": prefill_chunk,
            **({"fault": fault.as_dict()} if fault else {}),
            **({"drift": drift.as_dict()} if drift else {}),
        },
    }


def _is_emulator_engine(path: Path) -> bool:
    """Only a folder that build-engine wrote may be replaced by a rebuild."""
    try:
        config = bounds.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # also undecodable or nested too deep
        return False
    return isinstance(config, dict) and "emulator" in config


def build_engine(
    output: Path,
    limits: EngineLimits,
    *,
    model_dir: Path | None = None,
    compute_dtype: str = DEFAULT_COMPUTE_DTYPE,
    fault: Fault | None = None,
    drift: Drift | None = None,
    prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
) -> Path:
    """Write the engine directory (atomically: a half-built engine is never left behind)."""
    src = Path(model_dir) if model_dir else BUNDLED_MODEL
    config_file = src / "config.json"
    weights = src / "model.safetensors"
    if not config_file.is_file() or not weights.is_file():
        raise EngineError(
            f"--model {src}: expected a transformers model directory with config.json and model.safetensors"
        )
    try:
        model_config = bounds.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineError(f"{config_file}: cannot read ({exc})") from None
    if not isinstance(model_config, dict):
        raise EngineError(f"{config_file}: expected a JSON object at the top level")
    arch = model_config.get("architectures") or []
    if model_config.get("model_type") not in ("mistral", "llama"):
        raise EngineError(
            f"{config_file}: model_type {model_config.get('model_type')!r} with "
            f"architectures {arch}; the emulator runs Mistral/Llama models only"
        )
    _, _, max_input_len, max_seq_len = _built(limits)
    if max_seq_len <= max_input_len:
        raise EngineError(
            f"--max-seq-len {max_seq_len} must exceed --max-input-len "
            f"{max_input_len} (it counts prompt and output together)"
        )
    output = Path(output)
    confine.inside(output.parent, output)  # a rebuild replaces the folder, never a link's target
    if output.exists() and not output.is_dir():
        raise EngineError(f"--output {output}: is a file; choose a new folder")
    if output.exists() and any(output.iterdir()) and not _is_emulator_engine(output):
        raise EngineError(
            f"--output {output}: exists and is not an emulator engine directory; "
            "choose an empty or new folder (nothing was changed)"
        )
    if output.resolve() == src.resolve():
        raise EngineError(f"--output {output}: is the model directory itself; choose another folder")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        shutil.copyfile(weights, tmp / WEIGHTS_FILE)
        tok = tmp / TOKENIZER_DIR
        tok.mkdir()
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"):
            if (src / name).is_file():
                shutil.copyfile(src / name, tok / name)
        config = engine_config(model_config, limits, compute_dtype, fault, drift, prefill_chunk)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if output.exists():
            shutil.rmtree(output)
        os.replace(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output


def bundled_engine(cache_root: Path | None = None) -> Path:
    """The bundled engine (max_batch_size 8, max_beam_width 4), built once into the harness's
    cache folder (under ``cache_root`` in place of the user's cache directory, when given)."""
    from harness.storage.fingerprint import file_sha256

    folder = cache_root / CACHE_FOLDER if cache_root else harness_cache_dir()
    key = file_sha256(BUNDLED_MODEL / "model.safetensors")[:12]
    path = confine.inside(folder, folder / f"bundled-engine-{__version__}-{key}-{DEFAULT_COMPUTE_DTYPE}")
    if not (path / "config.json").is_file():
        build_engine(path, build_limits())
    return path
