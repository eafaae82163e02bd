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
from pathlib import Path

from harness import bounds
from harness.errors import EngineError
from harness.model.json import Json, JsonObject
from harness.model.limits import EngineLimits
from harness.model.vocab import Layout

# tensorrt_llm.quantization.QuantMode bits, as legacy configs store them (0.6 on)
INT8_KV_CACHE_BIT = 1 << 6
FP8_KV_CACHE_BIT = 1 << 7


class ConfigSection:
    """Typed access to one JSON object, with errors that name the file and the key path.
    ``integer``, ``number``, ``text``, ``flag`` and ``section`` give None for a key that is
    absent; their ``required_`` forms raise instead."""

    def __init__(self, data: Json, file: str, path: str) -> None:
        if not isinstance(data, dict):
            raise EngineError(
                f"{file}: {path or 'the top level'} must be a JSON object, found {type(data).__name__}"
            )
        self.data: JsonObject = data
        self.file, self.path = file, path

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _missing(self, key: str) -> EngineError:
        return EngineError(
            f"{self.file}: missing key {self._key(key)!r}; the engine directory looks damaged, rebuild it"
        )

    def section(self, key: str) -> ConfigSection | None:
        if key not in self.data or self.data[key] is None:
            return None
        return ConfigSection(self.data[key], self.file, self._key(key))

    def required_section(self, key: str) -> ConfigSection:
        found = self.section(key)
        if found is None:
            raise self._missing(key)
        return found

    def integer(self, key: str, *, positive: bool = True) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or (positive and value <= 0):
            kind = "a positive integer" if positive else "an integer"
            raise EngineError(f"{self.file}: {self._key(key)} must be {kind}, found {value!r}")
        too_large = bounds.config_int_too_large(key, abs(value))
        if too_large:
            raise EngineError(
                f"{self.file}: {self._key(key)} {too_large}; the engine directory "
                "looks damaged or was built with a typo, rebuild it"
            )
        return value

    def required_integer(self, key: str, *, positive: bool = True) -> int:
        value = self.integer(key, positive=positive)
        if value is None:
            raise self._missing(key)
        return value

    def number(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (abs(value) <= bounds.MAX_CONFIG_NUMBER)
        ):  # NaN and infinities too
            raise EngineError(
                f"{self.file}: {self._key(key)} must be a finite number of at most "
                f"{bounds.MAX_CONFIG_NUMBER:g}, found {value!r}"
            )
        return float(value)

    def required_number(self, key: str) -> float:
        value = self.number(key)
        if value is None:
            raise self._missing(key)
        return value

    def text(self, key: str) -> str | None:
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
    build = root.required_section("build_config")
    pre = root.required_section("pretrained_config")
    mapping = pre.section("mapping")
    quant = pre.section("quantization")
    plugins = build.section("plugin_config")
    emulator = root.section("emulator")
    max_seq_len, max_output_len = build.integer("max_seq_len"), build.integer("max_output_len")
    if max_seq_len is None and max_output_len is None:
        raise EngineError(
            f"{root.file}: missing key 'build_config.max_seq_len' (or "
            "'build_config.max_output_len' before 0.11); rebuild the engine"
        )
    heads, hidden = pre.integer("num_attention_heads"), pre.integer("hidden_size")
    dtype = pre.text("dtype")
    quant_algo = quant.text("quant_algo") if quant else None
    kv_algo = quant.text("kv_cache_quant_algo") if quant else None
    if emulator is not None:
        kv_dtype = emulator.text("compute_dtype") or dtype
    else:
        kv_dtype = _kv_dtype_from_algo(kv_algo, dtype)
    kv_type = build.text("kv_cache_type")
    paged = plugins.flag("paged_kv_cache") if plugins else None
    if kv_type is not None:
        paged = kv_type.upper() == "PAGED"
    return EngineLimits(
        layout=Layout.EMULATOR if emulator is not None else Layout.UNIFIED,
        version=root.text("version"),
        max_batch_size=build.required_integer("max_batch_size"),
        max_beam_width=build.required_integer("max_beam_width"),
        max_input_len=build.required_integer("max_input_len"),
        max_seq_len=max_seq_len,
        max_output_len=max_output_len,
        max_num_tokens=build.integer("max_num_tokens"),
        dtype=dtype,
        kv_cache_dtype=kv_dtype,
        quant_algo=quant_algo,
        num_layers=pre.integer("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=pre.integer("num_key_value_heads") or heads,
        head_size=_head_size(pre.integer("head_size"), hidden, heads),
        hidden_size=hidden,
        vocab_size=pre.integer("vocab_size"),
        tp_size=mapping.integer("tp_size") if mapping else None,
        pp_size=mapping.integer("pp_size") if mapping else None,
        paged_kv_cache=paged,
        tokens_per_block=plugins.integer("tokens_per_block") if plugins else None,
        emulator=emulator is not None,
    )


def _legacy(root: ConfigSection) -> EngineLimits:
    b = root.required_section("builder_config")
    plugins = root.section("plugin_config")
    heads, hidden = b.integer("num_heads"), b.integer("hidden_size")
    precision = b.text("precision")
    quant_mode = b.integer("quant_mode", positive=False)
    kv_dtype = precision
    if quant_mode is not None and quant_mode & FP8_KV_CACHE_BIT:
        kv_dtype = "fp8"
    elif (quant_mode is not None and quant_mode & INT8_KV_CACHE_BIT) or b.data.get("int8_kv_cache") is True:
        kv_dtype = "int8"
    return EngineLimits(
        layout=Layout.LEGACY,
        version=b.text("tensorrt_llm_version"),
        max_batch_size=b.required_integer("max_batch_size"),
        max_beam_width=b.integer("max_beam_width"),  # absent in 0.5: unknown, not 1
        max_input_len=b.required_integer("max_input_len"),
        max_output_len=b.required_integer("max_output_len"),
        max_num_tokens=b.integer("max_num_tokens"),
        dtype=precision,
        kv_cache_dtype=kv_dtype,
        quant_algo=f"quant_mode={quant_mode}" if quant_mode else None,
        num_layers=b.integer("num_layers"),
        num_heads=heads,
        num_kv_heads=b.integer("num_kv_heads") or heads,
        head_size=_head_size(b.integer("head_size"), hidden, heads),
        hidden_size=hidden,
        vocab_size=b.integer("vocab_size"),
        tp_size=b.integer("tensor_parallel"),
        pp_size=b.integer("pipeline_parallel"),
        paged_kv_cache=plugins.flag("paged_kv_cache") if plugins else None,
        tokens_per_block=plugins.integer("tokens_per_block") if plugins else None,
    )


def parse_config(config: Json, file: str = "config.json") -> EngineLimits:
    """EngineLimits from a parsed config.json object (any layout)."""
    root = ConfigSection(config, file, "")
    if "builder_config" in root.data:
        return _legacy(root)
    if "pretrained_config" in root.data or "build_config" in root.data or "version" in root.data:
        return _unified(root)
    raise EngineError(
        f"{file}: not a TensorRT-LLM engine config (no 'build_config'/"
        "'pretrained_config' and no legacy 'builder_config')"
    )


def load_config_json(engine_dir: str | Path, *, option: str = "") -> JsonObject:
    """The parsed config.json of an engine or model directory; EngineError when unreadable.

    ``option`` (e.g. "--engine") prefixes messages about the directory itself.
    """
    path = Path(engine_dir)
    label = f"{option} {path}" if option else str(path)
    if not path.exists():
        raise EngineError(
            f"{label}: no such engine directory; build one with "
            "`python -m harness build-engine --output DIR` or check the path"
        )
    if not path.is_dir():
        raise EngineError(f"{label}: is not a directory; give an engine or model folder")
    file = path / "config.json"
    if not file.is_file():
        raise EngineError(
            f"{file}: missing; an engine directory holds the config.json that "
            "trtllm-build (or `python -m harness build-engine`) writes"
        )
    return parse_config_text(file)


def parse_config_text(file: Path) -> JsonObject:
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
        where = (
            f" at line {exc.lineno} column {exc.colno} ({exc.msg})"
            if isinstance(exc, json.JSONDecodeError)
            else f" ({exc})"
        )
        raise EngineError(f"{file}: invalid JSON{where}; rebuild the engine") from None
    if not isinstance(config, dict):
        raise EngineError(f"{file}: expected a JSON object at the top level")
    return config


def read_engine_config(engine_dir: str | Path) -> tuple[JsonObject, EngineLimits]:
    """config.json of an engine directory, parsed and read; EngineError when unreadable."""
    config = load_config_json(engine_dir)
    return config, parse_config(config, str(Path(engine_dir) / "config.json"))


def weights_bytes(engine_dir: str | Path) -> int | None:
    """Bytes of weights one GPU holds: the largest per-rank engine file."""
    path = Path(engine_dir)
    files = [p for pattern in ("*.engine", "rank*.safetensors") for p in path.glob(pattern)]
    return max((p.stat().st_size for p in files), default=None)


def read_limits(config: JsonObject | None, file: str = "config.json") -> EngineLimits | None:
    """EngineLimits, or None for an engine without a config.json (an hf model, a user class)."""
    return None if config is None else parse_config(config, file)
