from __future__ import annotations

from harness.plan import Cell
from harness.preflight import check_cell, read_limits

UNIFIED = {
    "version": "0.13.0",
    "pretrained_config": {"architecture": "MistralForCausalLM", "dtype": "float16", "vocab_size": 32000,
                          "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                          "num_key_value_heads": 8, "head_size": 128,
                          "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1}},
    "build_config": {"max_batch_size": 8, "max_beam_width": 1, "max_input_len": 2048,
                     "max_seq_len": 2560, "max_num_tokens": 8192},
}
LEGACY_05 = {"builder_config": {"name": "llama", "precision": "float16", "max_batch_size": 8,
                                "max_input_len": 1024, "max_output_len": 512, "num_layers": 32},
             "plugin_config": {"gpt_attention_plugin": "float16"}}


def _checks(config, cell, longest=100, new=64):
    limits = read_limits(config)
    return {c.name: c for c in check_cell(cell, limits, longest_prompt=longest, prompts_over_input=0,
                                          max_new_tokens=new)}


def test_unified_limits():
    limits = read_limits(UNIFIED)
    assert (limits.layout, limits.max_batch_size, limits.max_beam_width, limits.max_seq_len,
            limits.num_kv_heads, limits.head_size) == ("unified", 8, 1, 2560, 8, 128)


def test_beam_width_over_limit_names_both_numbers_and_the_flag():
    checks = _checks(UNIFIED, Cell(8, 4))
    msg = checks["max_beam_width"].message
    assert checks["max_beam_width"].status == "fail"
    assert "num_beams 4" in msg and "max_beam_width 1" in msg and "--max_beam_width 4" in msg
    assert "--max_batch_size 8" in msg  # the other limits are kept
    assert checks["max_batch_size"].status == "pass"


def test_batch_and_sequence_limits():
    checks = _checks(UNIFIED, Cell(16, 1), longest=2500, new=100)
    assert checks["max_batch_size"].status == "fail" and "--max_batch_size 16" in checks["max_batch_size"].message
    assert checks["max_input_len"].status == "fail"
    assert checks["max_seq_len"].status == "fail" and "--max_seq_len 2600" in checks["max_seq_len"].message


def test_legacy_05_beam_width_is_unknown_not_one():
    limits = read_limits(LEGACY_05)
    assert limits.layout == "legacy" and limits.max_beam_width is None
    checks = _checks(LEGACY_05, Cell(8, 4))
    assert checks["max_beam_width"].status == "unknown"
    assert checks["max_seq_len"].status == "pass"  # 100 + 64 <= 1024 + 512


def test_no_config_means_every_check_unknown():
    assert {c.status for c in check_cell(Cell(2, 2), None, longest_prompt=5, prompts_over_input=0,
                                         max_new_tokens=4)} == {"unknown"}
