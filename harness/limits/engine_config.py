"""Read an engine's config.json, in every TensorRT-LLM layout, into one EngineLimits.

Layouts (trtllm-facts §1):
- legacy ``builder_config``/``plugin_config`` (0.5-0.8); 0.5 does not record max_beam_width,
  so it is unknown there, never 1; ``quant_mode`` is an int bitmask;
- unified ``version``/``pretrained_config``/``build_config``: 0.9-0.10 with max_output_len,
  0.11 on (1.x included) with max_seq_len;
- the emulator's own: unified plus an ``emulator`` section.
A field a layout does not record is None. A field that is present with the wrong type, or a
key every version of the layout writes that is missing, is an EngineError naming the file
and the key.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness import bounds
from harness.errors import EngineError

# tensorrt_llm.quantization.QuantMode bits, as legacy configs store them (0.6 on)
INT8_KV_CACHE_BIT = 1 << 6
FP8_KV_CACHE_BIT = 1 << 7
BYTES_PER_ELEMENT = {"float64": 8.0, "float32": 4.0, "float16": 2.0, "bfloat16": 2.0,
                     "int8": 1.0, "fp8": 1.0, "fp4": 0.5}


@dataclass(frozen=True)
class EngineLimits:
    """What an engine was built to accept, and the shape its KV cache has."""

    layout: str  # legacy | unified | emulator
    version: str | None = None  # TensorRT-LLM version that wrote the config
    max_batch_size: int | None = None
    max_beam_width: int | None = None
    max_input_len: int | None = None
    max_seq_len: int | None = None
    max_output_len: int | None = None
    max_num_tokens: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    quant_algo: str | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_size: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    tp_size: int | None = None
    pp_size: int | None = None
    paged_kv_cache: bool | None = None
    tokens_per_block: int | None = None
    emulator: bool = False

    @property
    def beam_slots(self) -> int | None:
        """KV-cache beam slots the engine allocated: max_batch_size x max_beam_width."""
        if self.max_batch_size is None or self.max_beam_width is None:
            return None
        return self.max_batch_size * self.max_beam_width

    @property
    def sequence_limit(self) -> int | None:
        """Prompt + output tokens an engine holds: max_seq_len, else input + output."""
        if self.max_seq_len is not None:
            return self.max_seq_len
        if self.max_input_len is not None and self.max_output_len is not None:
            return self.max_input_len + self.max_output_len
        return None

    @property
    def kv_bytes_per_element(self) -> float | None:
        return BYTES_PER_ELEMENT.get(self.kv_cache_dtype or "")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def overflow_positions(batch_size: int, beam_width: int, slots: int | None) -> tuple[int, ...]:
    """Batch positions whose beam slots (``position * beam_width + beam``) lie beyond ``slots``:
    the ones a KV cache of that many beam slots cannot hold (None: unknown, none)."""
    if slots is None:
        return ()
    return tuple(p for p in range(batch_size) if (p + 1) * beam_width > slots)


class ConfigSection:
    """Typed access to one JSON object, with errors that name the file and the key path."""

    def __init__(self, data: Any, file: str, path: str) -> None:
        if not isinstance(data, dict):
            raise EngineError(f"{file}: {path or 'the top level'} must be a JSON object, "
                              f"found {type(data).__name__}")
        self.data, self.file, self.path = data, file, path

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _missing(self, key: str) -> EngineError:
        return EngineError(f"{self.file}: missing key {self._key(key)!r}; the engine directory "
                           "looks damaged, rebuild it")

    def section(self, key: str, *, required: bool = False) -> ConfigSection | None:
        if key not in self.data or self.data[key] is None:
            if required:
                raise self._missing(key)
            return None
        return ConfigSection(self.data[key], self.file, self._key(key))

    def int(self, key: str, *, required: bool = False, positive: bool = True) -> int | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise self._missing(key)
            return None
        if isinstance(value, bool) or not isinstance(value, int) or (positive and value <= 0):
            kind = "a positive integer" if positive else "an integer"
            raise EngineError(f"{self.file}: {self._key(key)} must be {kind}, found {value!r}")
        too_large = bounds.config_int_too_large(key, abs(value))
        if too_large:
            raise EngineError(f"{self.file}: {self._key(key)} {too_large}; the engine directory "
                              "looks damaged or was built with a typo, rebuild it")
        return value

    def float(self, key: str, *, required: bool = False) -> float | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise self._missing(key)
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                abs(value) <= bounds.MAX_CONFIG_NUMBER):  # NaN and infinities too
            raise EngineError(f"{self.file}: {self._key(key)} must be a finite number of at most "
                              f"{bounds.MAX_CONFIG_NUMBER:g}, found {value!r}")
        return float(value)

    def str(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise EngineError(f"{self.file}: {self._key(key)} must be a string, found {value!r}")
        return value

    def flag(self, key: str) -> bool | None:
        """Booleans; plugin flags written as 'enable'/'disable' or a dtype count as on/off."""
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            return value.lower() not in ("disable", "false", "none", "")
        raise EngineError(f"{self.file}: {self._key(key)} must be true or false, found {value!r}")


def _kv_dtype_from_algo(algo: str | None, dtype: str | None) -> str | None:
    if algo:
        upper = algo.upper()
        if "FP8" in upper:
            return "fp8"
        if "INT8" in upper:
            return "int8"
        if "FP4" in upper:
            return "fp4"
    return dtype


def _head_size(head_size: int | None, hidden: int | None, heads: int | None) -> int | None:
    if head_size is not None:
        return head_size
    return hidden // heads if hidden and heads else None


def _unified(root: ConfigSection) -> EngineLimits:
    build = root.section("build_config", required=True)
    pre = root.section("pretrained_config", required=True)
    assert build is not None and pre is not None
    mapping = pre.section("mapping")
    quant = pre.section("quantization")
    plugins = build.section("plugin_config")
    emulator = root.section("emulator")
    max_seq_len, max_output_len = build.int("max_seq_len"), build.int("max_output_len")
    if max_seq_len is None and max_output_len is None:
        raise EngineError(f"{root.file}: missing key 'build_config.max_seq_len' (or "
                          "'build_config.max_output_len' before 0.11); rebuild the engine")
    heads, hidden = pre.int("num_attention_heads"), pre.int("hidden_size")
    dtype = pre.str("dtype")
    quant_algo = quant.str("quant_algo") if quant else None
    kv_algo = quant.str("kv_cache_quant_algo") if quant else None
    if emulator is not None:
        kv_dtype = emulator.str("compute_dtype") or dtype
    else:
        kv_dtype = _kv_dtype_from_algo(kv_algo, dtype)
    kv_type = build.str("kv_cache_type")
    paged = plugins.flag("paged_kv_cache") if plugins else None
    if kv_type is not None:
        paged = kv_type.upper() == "PAGED"
    return EngineLimits(
        layout="emulator" if emulator is not None else "unified",
        version=root.str("version"),
        max_batch_size=build.int("max_batch_size", required=True),
        max_beam_width=build.int("max_beam_width", required=True),
        max_input_len=build.int("max_input_len", required=True),
        max_seq_len=max_seq_len, max_output_len=max_output_len,
        max_num_tokens=build.int("max_num_tokens"),
        dtype=dtype, kv_cache_dtype=kv_dtype, quant_algo=quant_algo,
        num_layers=pre.int("num_hidden_layers"), num_heads=heads,
        num_kv_heads=pre.int("num_key_value_heads") or heads,
        head_size=_head_size(pre.int("head_size"), hidden, heads), hidden_size=hidden,
        vocab_size=pre.int("vocab_size"),
        tp_size=mapping.int("tp_size") if mapping else None,
        pp_size=mapping.int("pp_size") if mapping else None,
        paged_kv_cache=paged,
        tokens_per_block=plugins.int("tokens_per_block") if plugins else None,
        emulator=emulator is not None)


def _legacy(root: ConfigSection) -> EngineLimits:
    b = root.section("builder_config", required=True)
    assert b is not None
    plugins = root.section("plugin_config")
    heads, hidden = b.int("num_heads"), b.int("hidden_size")
    precision = b.str("precision")
    quant_mode = b.int("quant_mode", positive=False)
    kv_dtype = precision
    if quant_mode is not None and quant_mode & FP8_KV_CACHE_BIT:
        kv_dtype = "fp8"
    elif (quant_mode is not None and quant_mode & INT8_KV_CACHE_BIT) or b.data.get("int8_kv_cache") is True:
        kv_dtype = "int8"
    return EngineLimits(
        layout="legacy", version=b.str("tensorrt_llm_version"),
        max_batch_size=b.int("max_batch_size", required=True),
        max_beam_width=b.int("max_beam_width"),  # absent in 0.5: unknown, not 1
        max_input_len=b.int("max_input_len", required=True),
        max_output_len=b.int("max_output_len", required=True),
        max_num_tokens=b.int("max_num_tokens"),
        dtype=precision, kv_cache_dtype=kv_dtype,
        quant_algo=f"quant_mode={quant_mode}" if quant_mode else None,
        num_layers=b.int("num_layers"), num_heads=heads,
        num_kv_heads=b.int("num_kv_heads") or heads,
        head_size=_head_size(b.int("head_size"), hidden, heads), hidden_size=hidden,
        vocab_size=b.int("vocab_size"),
        tp_size=b.int("tensor_parallel"), pp_size=b.int("pipeline_parallel"),
        paged_kv_cache=plugins.flag("paged_kv_cache") if plugins else None,
        tokens_per_block=plugins.int("tokens_per_block") if plugins else None)


def parse_config(config: Any, file: str = "config.json") -> EngineLimits:
    """EngineLimits from a parsed config.json object (any layout)."""
    root = ConfigSection(config, file, "")
    if "builder_config" in root.data:
        return _legacy(root)
    if "pretrained_config" in root.data or "build_config" in root.data or "version" in root.data:
        return _unified(root)
    raise EngineError(f"{file}: not a TensorRT-LLM engine config (no 'build_config'/"
                      "'pretrained_config' and no legacy 'builder_config')")


def load_config_json(engine_dir: str | Path, *, option: str = "") -> dict[str, Any]:
    """The parsed config.json of an engine or model directory; EngineError when unreadable.

    ``option`` (e.g. "--engine") prefixes messages about the directory itself.
    """
    path = Path(engine_dir)
    label = f"{option} {path}" if option else str(path)
    if not path.exists():
        raise EngineError(f"{label}: no such engine directory; build one with "
                          "`python -m harness build-engine --output DIR` or check the path")
    if not path.is_dir():
        raise EngineError(f"{label}: is not a directory; give an engine or model folder")
    file = path / "config.json"
    if not file.is_file():
        raise EngineError(f"{file}: missing; an engine directory holds the config.json that "
                          "trtllm-build (or `python -m harness build-engine`) writes")
    return parse_config_text(file)


def parse_config_text(file: Path) -> dict[str, Any]:
    """config.json read and parsed, bounded in nesting; EngineError naming the file."""
    try:
        config = bounds.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EngineError(f"{file}: cannot read ({exc.strerror or exc}); check the file") from None
    except UnicodeDecodeError:
        raise EngineError(f"{file}: not UTF-8 text; rebuild the engine") from None
    except bounds.TooDeep as exc:
        raise EngineError(f"{file}: {exc}, which no engine config is; rebuild the engine") from None
    except ValueError as exc:  # json.JSONDecodeError
        where = (f" at line {exc.lineno} column {exc.colno} ({exc.msg})"
                 if isinstance(exc, json.JSONDecodeError) else f" ({exc})")
        raise EngineError(f"{file}: invalid JSON{where}; rebuild the engine") from None
    if not isinstance(config, dict):
        raise EngineError(f"{file}: expected a JSON object at the top level")
    return config


def read_engine_config(engine_dir: str | Path) -> tuple[dict[str, Any], EngineLimits]:
    """config.json of an engine directory, parsed and read; EngineError when unreadable."""
    config = load_config_json(engine_dir)
    return config, parse_config(config, str(Path(engine_dir) / "config.json"))


def weights_bytes(engine_dir: str | Path) -> int | None:
    """Bytes of weights one GPU holds: the largest per-rank engine file."""
    path = Path(engine_dir)
    files = [p for pattern in ("*.engine", "rank*.safetensors") for p in path.glob(pattern)]
    return max((p.stat().st_size for p in files), default=None)


def read_limits(config: dict[str, Any] | None, file: str = "config.json") -> EngineLimits | None:
    """EngineLimits, or None for an engine without a config.json (an hf model, a user class)."""
    return None if config is None else parse_config(config, file)
