from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config import parse_size
from harness.errors import ConfigError
from harness.limits.engine_config import parse_config
from harness.limits.preflight import check_cell, gpu_memory, kv_cache_bytes, memory_budget
from harness.limits.ranks import world_size
from harness.model.cell import Cell
from harness.model.json import JsonObject
from harness.model.limits import EngineLimits, LimitCheck
from harness.model.vocab import CheckStatus

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"
MISTRAL: JsonObject = {
    "version": "0.13.0",
    "pretrained_config": {
        "architecture": "MistralForCausalLM",
        "dtype": "float16",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_size": 128,
        "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
    },
    "build_config": {
        "max_batch_size": 8,
        "max_beam_width": 1,
        "max_input_len": 2048,
        "max_seq_len": 2560,
        "max_num_tokens": 8192,
    },
}


def _limits(name: str) -> EngineLimits:
    return parse_config(json.loads((CONFIGS / name).read_text()), name)


def _checks(
    limits: EngineLimits, cell: Cell, longest: int = 100, new: int = 64, processes: int = 1
) -> dict[str, LimitCheck]:
    return {
        c.name: c
        for c in check_cell(
            cell,
            limits,
            longest_prompt=longest,
            prompts_over_input=3,
            max_new_tokens=new,
            processes=processes,
        )
    }


def test_beam_width_over_limit_names_both_numbers_and_the_flag() -> None:
    checks = _checks(parse_config(MISTRAL), Cell(8, 4))
    msg = checks["max_beam_width"].message
    assert checks["max_beam_width"].status == "fail"
    assert "num_beams 4" in msg and "max_beam_width 1" in msg and "--max_beam_width 4" in msg
    assert "--max_batch_size 8 --max_input_len 2048 --max_seq_len 2560" in msg  # others kept
    assert checks["max_batch_size"].status == "pass"


def test_batch_input_and_sequence_limits() -> None:
    checks = _checks(parse_config(MISTRAL), Cell(16, 1), longest=2500, new=100)
    assert (
        checks["max_batch_size"].status == "fail"
        and "--max_batch_size 16" in checks["max_batch_size"].message
    )
    assert (
        checks["max_input_len"].status == "fail"
        and "3 prompts would be truncated" in checks["max_input_len"].message
    )
    assert checks["max_seq_len"].status == "fail" and "--max_seq_len 2600" in checks["max_seq_len"].message


def test_legacy_05_beam_width_is_unknown_and_output_len_is_the_fix() -> None:
    checks = _checks(_limits("legacy_0.5_llama.json"), Cell(8, 4), longest=1000, new=600)
    assert (
        checks["max_beam_width"].status == "unknown"
        and "not assumed to be 1" in checks["max_beam_width"].message
    )
    assert checks["max_seq_len"].status == "fail"
    assert "--max_output_len 576" in checks["max_seq_len"].message  # 1000 + 600 - 1024


def test_ranks_must_match_processes() -> None:
    limits = _limits("unified_1.0_mistral_sq_fp8kv_tp2.json")
    assert _checks(limits, Cell(1, 1), processes=1)["ranks"].status == "fail"
    assert "mpirun -n 2" in _checks(limits, Cell(1, 1))["ranks"].message
    assert _checks(limits, Cell(1, 1), processes=2)["ranks"].status == "pass"


def test_no_config_means_every_check_unknown() -> None:
    assert {
        c.status
        for c in check_cell(Cell(2, 2), None, longest_prompt=5, prompts_over_input=0, max_new_tokens=4)
    } == {"unknown"}


def test_kv_cache_bytes_formula() -> None:
    lim = parse_config(MISTRAL)
    assert kv_cache_bytes(lim, 8, 4) == 2 * 32 * 8 * 128 * 2560 * 8 * 4 * 2
    fp8_tp2 = _limits("unified_1.0_mistral_sq_fp8kv_tp2.json")
    assert kv_cache_bytes(fp8_tp2, 64, 4) == 2 * 32 * 8 * 128 * 8192 * 64 * 4 * 1 // 2
    int8 = _limits("legacy_0.7_llama_sq_int8kv.json")  # max_input_len + max_output_len
    assert kv_cache_bytes(int8, 16, 1) == 2 * 32 * 32 * 128 * 2560 * 16 * 1 * 1


def test_memory_budget_fails_or_warns() -> None:
    lim = parse_config(MISTRAL)
    gpu = (parse_size("80GiB"), "--gpu-memory 80GiB")
    ok = memory_budget(lim, 8, 4, label="bs8-beam4", weights=14 * 2**30, gpu=gpu, over=CheckStatus.FAIL)
    assert ok.status == "pass" and "fits in 80.00 GiB" in ok.message
    big = memory_budget(lim, 64, 8, label="x", weights=14 * 2**30, gpu=gpu, over=CheckStatus.FAIL)
    assert big.status == "fail" and "exceeds 80.00 GiB" in big.message
    assert memory_budget(lim, 64, 8, label="x", weights=0, gpu=gpu, over=CheckStatus.WARN).status == "warn"


@pytest.mark.parametrize(
    "text, n",
    [
        ("80GiB", 80 * 2**30),
        ("141GB", 141 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1024", 1024),
        ("1.5 GiB", int(1.5 * 2**30)),
    ],
)
def test_parse_size(text: str, n: int) -> None:
    assert parse_size(text) == n


def test_parse_size_rejects() -> None:
    with pytest.raises(ConfigError, match="--gpu-memory 'lots'"):
        parse_size("lots")


def test_gpu_memory_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    assert gpu_memory("40GiB") == (40 * 2**30, "--gpu-memory 40GiB")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    size, source = gpu_memory(None)
    assert size == 80 * 2**30 and "assumed 80GiB" in source


def test_world_size_from_mpi(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert world_size() == 1
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert world_size() == 4
