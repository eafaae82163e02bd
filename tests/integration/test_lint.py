"""`python -m harness lint` as a user runs it: exit codes, messages, JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import cast

import pytest

from tests.integration.common import EngineFactory
from tests.processes import finish, harness_command
from tests.unit.limits.test_preflight import MISTRAL


def lint(*args: str) -> subprocess.CompletedProcess[str]:
    return finish(harness_command("lint", *args), timeout=300)


def _engine(tmp_path: Path, beam: int) -> Path:
    d = tmp_path / f"mistral-bw{beam}"
    d.mkdir()
    config = json.loads(json.dumps(MISTRAL))
    config["build_config"]["max_beam_width"] = beam
    (d / "config.json").write_text(json.dumps(config))
    (d / "rank0.engine").write_bytes(b"\0" * 4096)
    return d


def test_incident_engine_fails_and_names_the_fix(tmp_path: Path) -> None:
    proc = lint(str(_engine(tmp_path, 1)), "--batch-size", "8", "--num-beams", "4")
    assert proc.returncode == 1, proc.stderr
    assert "max_beam_width 1" in proc.stdout and "num_beams 4" in proc.stdout
    assert "--max_beam_width 4" in proc.stdout
    assert "FAIL    max_beam_width" in proc.stdout and "verdict: fail" in proc.stdout


def test_rebuilt_engine_passes_with_kv_bytes(tmp_path: Path) -> None:
    proc = lint(
        str(_engine(tmp_path, 4)), "--batch-size", "8", "--num-beams", "4", "--json", "--gpu-memory", "80GiB"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["kv_cache_bytes"] == 2 * 32 * 8 * 128 * 2560 * 8 * 4 * 2
    assert out["limits"]["max_beam_width"] == 4 and out["verdict"] == "pass"
    assert {c["name"] for c in out["checks"]} >= {"max_batch_size", "max_beam_width", "kv_cache_memory"}
    assert all(set(c) == {"name", "status", "message"} for c in out["checks"])
    memory = {c["name"]: c for c in out["checks"]}["kv_cache_memory"]
    assert memory["status"] == "pass" and "10.00 GiB" in memory["message"]


def test_memory_that_does_not_fit_fails(tmp_path: Path) -> None:
    proc = lint(str(_engine(tmp_path, 4)), "--batch-size", "8", "--num-beams", "4", "--gpu-memory", "8GiB")
    assert proc.returncode == 1
    assert "FAIL    kv_cache_memory" in proc.stdout and "exceeds 8.00 GiB" in proc.stdout


def test_emulator_engine_checks_prompt_lengths(engine_factory: EngineFactory) -> None:
    proc = lint(str(engine_factory(8, 1)), "--num-beams", "1", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c["status"] for c in json.loads(proc.stdout)["checks"]}
    assert checks["max_input_len"] == "pass" and checks["max_seq_len"] == "pass"


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "config.json: missing"),
        ('{"version": "0.13.0", ', "invalid JSON at line 1"),
        (
            json.dumps(
                {
                    **MISTRAL,
                    "build_config": {
                        # a dict: MISTRAL has no annotation, so mypy sees its sections as collections
                        **cast("dict[str, object]", MISTRAL["build_config"]),
                        "max_batch_size": "8",
                    },
                }
            ),
            "build_config.max_batch_size must be a positive integer",
        ),
        (json.dumps({"version": "0.13.0", "pretrained_config": {}}), "missing key 'build_config'"),
    ],
)
def test_unreadable_engine_exits_2_with_one_line(tmp_path: Path, content: str | None, words: str) -> None:
    d = tmp_path / "e"
    d.mkdir()
    if content is not None:
        (d / "config.json").write_text(content)
    proc = lint(str(d))
    assert proc.returncode == 2
    assert words in proc.stderr and str(d) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_lint_leaves_the_rank_check_to_the_run(tmp_path: Path) -> None:
    d = tmp_path / "tp2"
    d.mkdir()
    src = Path(__file__).resolve().parents[1] / "data" / "configs" / "unified_1.0_mistral_sq_fp8kv_tp2.json"
    (d / "config.json").write_text(src.read_text())
    proc = lint(str(d), "--batch-size", "8", "--num-beams", "4", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ranks" not in {c["name"] for c in json.loads(proc.stdout)["checks"]}
