"""Readers for every config.json layout, on realistic example configs (tests/data/configs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import EngineError
from harness.limits.engine_config import parse_config, read_engine_config
from harness.model.json import Json
from harness.model.limits import EngineLimits

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"


def _read(name: str) -> EngineLimits:
    return parse_config(json.loads((CONFIGS / name).read_text()), name)


def test_legacy_05_has_no_beam_width() -> None:
    lim = _read("legacy_0.5_llama.json")
    assert lim.layout == "legacy" and lim.version is None
    assert lim.max_beam_width is None  # unknown, never assumed to be 1
    assert (lim.max_batch_size, lim.max_input_len, lim.max_output_len, lim.max_seq_len) == (
        8,
        1024,
        512,
        None,
    )
    assert lim.sequence_limit == 1536
    assert (lim.num_layers, lim.num_heads, lim.num_kv_heads, lim.head_size) == (32, 32, 32, 128)
    assert (lim.tp_size, lim.pp_size, lim.paged_kv_cache, lim.kv_cache_dtype) == (1, 1, False, "float16")


def test_legacy_07_smoothquant_with_int8_kv_cache() -> None:
    lim = _read("legacy_0.7_llama_sq_int8kv.json")
    assert lim.max_beam_width == 1 and lim.max_num_tokens == 32768
    assert lim.kv_cache_dtype == "int8" and lim.kv_bytes_per_element == 1
    assert lim.paged_kv_cache is True and lim.tokens_per_block == 128


def test_unified_09_with_max_output_len() -> None:
    lim = _read("unified_0.9_mistral_sq.json")
    assert lim.layout == "unified" and lim.version == "0.9.0"
    assert (lim.max_seq_len, lim.max_output_len, lim.sequence_limit) == (None, 512, 2560)
    assert lim.quant_algo == "W8A8_SQ_PER_CHANNEL" and lim.kv_cache_dtype == "float16"
    assert (lim.num_kv_heads, lim.head_size, lim.tokens_per_block) == (8, 128, 128)


def test_unified_013_llama2() -> None:
    lim = _read("unified_0.13_llama2.json")
    assert (lim.max_batch_size, lim.max_beam_width, lim.max_input_len, lim.max_seq_len) == (
        256,
        1,
        1024,
        4096,
    )
    assert (lim.max_num_tokens, lim.paged_kv_cache, lim.tokens_per_block) == (8192, True, 64)
    assert lim.vocab_size == 32000 and lim.dtype == "float16"


def test_unified_1x_smoothquant_weights_fp8_kv_cache_tp2() -> None:
    lim = _read("unified_1.0_mistral_sq_fp8kv_tp2.json")
    assert lim.version == "1.0.0" and lim.quant_algo == "W8A8_SQ_PER_CHANNEL"
    assert lim.kv_cache_dtype == "fp8" and lim.kv_bytes_per_element == 1
    assert (lim.tp_size, lim.pp_size, lim.max_beam_width, lim.max_seq_len) == (2, 1, 4, 8192)


def test_emulator_layout(engine_factory: Callable[[int, int], Path]) -> None:
    _, lim = read_engine_config(engine_factory(8, 1))
    assert lim.layout == "emulator" and lim.emulator
    assert (lim.max_batch_size, lim.max_beam_width, lim.max_seq_len) == (8, 1, 512)
    assert lim.kv_cache_dtype == "float32"  # what the emulator's cache really holds (its compute dtype)
    assert lim.kv_bytes_per_element == 4


@pytest.mark.parametrize(
    "mutate, words",
    [
        (
            lambda c: c["build_config"].update(max_beam_width="4"),
            "build_config.max_beam_width must be a positive integer, found '4'",
        ),
        (lambda c: c["build_config"].pop("max_batch_size"), "missing key 'build_config.max_batch_size'"),
        (lambda c: c.update(build_config=[1, 2]), "build_config must be a JSON object"),
        (
            lambda c: c["pretrained_config"].update(num_hidden_layers=-3),
            "pretrained_config.num_hidden_layers",
        ),
        (lambda c: c["build_config"].pop("max_seq_len"), "build_config.max_seq_len"),
        (
            lambda c: c["pretrained_config"]["mapping"].update(tp_size=True),
            "pretrained_config.mapping.tp_size",
        ),
    ],
)
def test_damaged_configs_name_file_and_key(mutate: Callable[[dict[str, Any]], object], words: str) -> None:
    config = json.loads((CONFIGS / "unified_0.13_llama2.json").read_text())
    mutate(config)
    with pytest.raises(EngineError) as exc:
        parse_config(config, "engine/config.json")
    assert str(exc.value).startswith("engine/config.json: ") and words in str(exc.value)


def test_unreadable_directories(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="no such engine directory"):
        read_engine_config(tmp_path / "none")
    with pytest.raises(EngineError, match="config.json: missing"):
        read_engine_config(tmp_path)
    (tmp_path / "config.json").write_text('{"version": "0.13.0",')
    with pytest.raises(EngineError, match="invalid JSON at line 1"):
        read_engine_config(tmp_path)
    (tmp_path / "config.json").write_text('{"hello": 1}')
    with pytest.raises(EngineError, match="not a TensorRT-LLM engine config"):
        read_engine_config(tmp_path)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=30,
)
KEYS = st.sampled_from(
    [
        "version",
        "pretrained_config",
        "build_config",
        "builder_config",
        "plugin_config",
        "max_batch_size",
        "max_beam_width",
        "max_input_len",
        "max_seq_len",
        "max_output_len",
        "mapping",
        "tp_size",
        "quantization",
        "kv_cache_quant_algo",
        "num_hidden_layers",
        "emulator",
    ]
)
CONFIGISH = st.recursive(JSON, lambda inner: st.dictionaries(KEYS, inner, max_size=8), max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(CONFIGISH)
def test_readers_either_read_or_raise_one_clear_error(config: Json) -> None:
    """Whatever the JSON holds, the reader returns limits or an EngineError naming the file."""
    try:
        limits = parse_config(config, "x/config.json")
    except EngineError as exc:
        assert str(exc).startswith("x/config.json: ") and "\n" not in str(exc)
    else:
        for name in ("max_batch_size", "max_beam_width", "max_input_len", "max_seq_len"):
            value = getattr(limits, name)
            assert value is None or (isinstance(value, int) and value > 0)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 64), st.integers(1, 10**5), st.integers(1, 10**5))
def test_unified_values_round_trip(batch: int, beam: int, inp: int, seq: int) -> None:
    config = json.loads((CONFIGS / "unified_0.13_llama2.json").read_text())
    config["build_config"].update(
        max_batch_size=batch, max_beam_width=beam, max_input_len=inp, max_seq_len=seq
    )
    lim = parse_config(config)
    assert (lim.max_batch_size, lim.max_beam_width, lim.max_input_len, lim.max_seq_len) == (
        batch,
        beam,
        inp,
        seq,
    )
