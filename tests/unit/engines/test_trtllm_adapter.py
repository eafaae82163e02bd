"""Contract tests of the trtllm backend against a TEST DOUBLE of TensorRT-LLM.

TensorRT-LLM cannot run here: the 1.x double (``tests/doubles/trtllm_1_x.py``) stands in for
it with that line's runner signatures, output layout and refusal messages. What is tested is
the adapter: the calls it makes, how it cuts and keeps outputs, and how a refusal travels to
the cell. ``test_trtllm_contract.py`` runs the same contract against every release line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.config import DecodingSettings, EngineOptions, RunConfig
from harness.engines.registry import detect_backend, load_engine
from harness.engines.trtllm import TrtllmEngine, cut_generations
from harness.errors import ConfigError, EngineError
from harness.inputs.data import build_prompt
from harness.limits.engine_config import parse_config
from harness.model.vocab import TrtllmRuntime
from harness.stages.plan_only import plan_only
from harness.stages.prepare import load_run_dataset
from tests.doubles import trtllm_1_x as double
from tests.doubles.trtllm_1_x import make_engine_dir
from tests.doubles.trtllm_common import BUNDLED_MODEL, Recorder, continuation
from tests.integration.common import cli_options
from tests.processes import REPO, checkout_env, finish
from tests.unit.engines.pipeline_runs import run_config, run_pipeline, written_report

MISSING = 'the trtllm backend needs TensorRT-LLM: pip install "batch-position-harness[trtllm]"'
TOKENIZER = EngineOptions(tokenizer=str(BUNDLED_MODEL))
PROMPTS = [
    "A short one. TL;DR: ",
    "A much longer prompt, with many more words in it than the first one has, so that "
    "the batch holds prompts of different lengths. TL;DR: ",
    "Middle length prompt here, some words. TL;DR: ",
]


@pytest.fixture
def trt(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    return double.install(monkeypatch)


def _ids(engine: TrtllmEngine, prompts: list[str]) -> list[list[int]]:
    return [list(x) for x in engine.tokenizer(prompts)["input_ids"]]


def test_importing_the_backends_does_not_import_tensorrt_llm() -> None:
    code = (
        "import sys, harness.engines.trtllm, harness.engines.llmapi, harness.engines.registry, "
        "harness.pipeline; print('tensorrt_llm' in sys.modules)"
    )
    out = finish([sys.executable, "-c", code], cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_missing_tensorrt_llm_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # as if not installed
    engine = make_engine_dir(tmp_path / "e", with_tokenizer=True)
    with pytest.raises(EngineError) as exc:
        TrtllmEngine(engine)
    assert str(exc.value) == MISSING
    with pytest.raises(EngineError) as exc:
        load_engine(str(engine))  # detected as trtllm
    assert str(exc.value) == MISSING


def test_missing_tensorrt_llm_through_the_cli(tmp_path: Path, small_dataset: Path) -> None:
    engine = make_engine_dir(tmp_path / "e", with_tokenizer=True)
    # `python -m harness run ...` with tensorrt_llm made unimportable even where it is installed
    code = (
        "import runpy, sys; sys.modules['tensorrt_llm'] = None; sys.argv[0] = 'harness'; "
        "runpy.run_module('harness', run_name='__main__', alter_sys=True)"
    )
    cmd = [sys.executable, "-c", code, "run", *cli_options(engine, small_dataset, tmp_path / "r")]
    proc = finish(cmd, cwd=tmp_path, env=checkout_env(), timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: {MISSING}"]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_detects_every_tensorrt_llm_layout(tmp_path: Path) -> None:
    for sample in sorted((REPO / "tests" / "data" / "configs").glob("*.json")):
        folder = tmp_path / sample.stem
        folder.mkdir()
        (folder / "config.json").write_text(sample.read_text())
        assert detect_backend(folder) == "trtllm", sample.name


@pytest.mark.parametrize("runtime, runner", [("cpp", "ModelRunnerCpp"), ("python", "ModelRunner")])
def test_one_call_per_batch_cut_per_position_beam0_scored(
    tmp_path: Path, trt: Recorder, runtime: str, runner: str
) -> None:
    engine = TrtllmEngine(
        make_engine_dir(tmp_path / "e", max_beam_width=4),
        options=EngineOptions(tokenizer=str(BUNDLED_MODEL), trtllm_runtime=TrtllmRuntime(runtime)),
    )
    # the first runner serves the first cells (greedy): the C++ one is loaded for that width
    assert trt.loads == [
        {"runner": runner, "engine_dir": str(tmp_path / "e"), "rank": 0}
        | ({"max_beam_width": 1, "kv_cache_enable_block_reuse": False} if runtime == "cpp" else {})
    ]
    settings = DecodingSettings(beam_width=2, max_new_tokens=8, length_penalty=0.5)
    gens = engine.generate(PROMPTS, settings)

    ids = _ids(engine, PROMPTS)
    assert len({len(x) for x in ids}) == 3  # different input lengths in one batch
    [call] = trt.calls
    assert call["runner"] == runner and call["ids"] == ids  # plan order, one call
    assert call["num_beams"] == 2 and call["max_new_tokens"] == 8 and call["length_penalty"] == 0.5
    assert call["early_stopping"] == 1 and "top_k" not in call
    assert call["end_id"] == 2 and call["pad_id"] == 3  # the tokenizer's eos and pad
    for gen, prompt_ids in zip(gens, ids):
        expected = [continuation(prompt_ids, k, 8, 2) for k in range(2)]
        texts = tuple(engine.tokenizer.decode(e, skip_special_tokens=True).strip() for e in expected)
        assert gen.token_ids == tuple(expected[0])
        assert gen.beams == texts and gen.text == texts[0]
        assert gen.beams[0] != gen.beams[1]  # beam 0, not any beam, is the scored text


def test_greedy_is_one_beam(tmp_path: Path, trt: Recorder) -> None:
    engine = TrtllmEngine(make_engine_dir(tmp_path / "e"), options=TOKENIZER)
    gens = engine.generate(PROMPTS[:2], DecodingSettings(beam_width=1, max_new_tokens=5))
    [call] = trt.calls
    assert call["num_beams"] == 1 and call["top_k"] == 1
    assert [len(g.beams) for g in gens] == [1, 1]
    assert [len(g.token_ids) for g in gens] == [min(5, 3 + len(x) % 9) for x in _ids(engine, PROMPTS[:2])]


def test_cut_generations_uses_each_input_length_and_sequence_length() -> None:
    end = 9
    # request 0: prompt [5, 6], beam 0 generates [7, 8], beam 1 generates [1]
    # request 1: prompt [1, 2, 3, 4], beam 0 generates [6], beam 1 nothing
    output_ids = torch.tensor(
        [[[5, 6, 7, 8, end, end], [5, 6, 1, end, end, end]], [[1, 2, 3, 4, 6, end], [1, 2, 3, 4, end, end]]],
        dtype=torch.int32,
    )
    lengths = torch.tensor([[4, 3], [5, 4]], dtype=torch.int32)
    assert cut_generations(output_ids, lengths, [2, 4], 2, end) == [[[7, 8], [1]], [[6], []]]
    # sequence_lengths bound each beam even where no end_id follows
    assert cut_generations(output_ids, torch.tensor([[3, 2], [4, 4]]), [2, 4], 2, end) == [
        [[7], []],
        [[], []],
    ]
    # an end_id inside the counted length ends the sequence there
    assert cut_generations(output_ids, torch.tensor([[5, 3], [6, 4]]), [2, 4], 2, end) == [
        [[7, 8], [1]],
        [[6], []],
    ]
    with pytest.raises(RuntimeError, match=r"expected \[3, 2, max_seq_len\]"):
        cut_generations(output_ids, lengths, [2, 4, 1], 2, end)
    with pytest.raises(RuntimeError, match="expected"):
        cut_generations(output_ids[:, :1], lengths[:, :1], [2, 4], 2, end)


def test_refusal_propagates_with_the_runners_message(tmp_path: Path, trt: Recorder) -> None:
    engine = TrtllmEngine(make_engine_dir(tmp_path / "e", max_beam_width=1), options=TOKENIZER)
    with pytest.raises(RuntimeError) as exc:
        engine.generate(PROMPTS, DecodingSettings(beam_width=4, max_new_tokens=8))
    assert str(exc.value) == "Num beams (4) exceeds the engine or specified limit (1)"


def test_engine_info(tmp_path: Path, trt: Recorder) -> None:
    import hashlib

    path = make_engine_dir(tmp_path / "e", max_beam_width=2)
    engine = TrtllmEngine(path, options=TOKENIZER)
    info = engine.info
    assert info.backend == "trtllm" and info.path == str(path)
    assert info.identity == "sha256:" + hashlib.sha256((path / "rank0.engine").read_bytes()).hexdigest()
    assert engine.limits == parse_config(json.loads((path / "config.json").read_text()))
    assert info.details["runtime"] == "cpp" and info.details["tensorrt_llm"] == double.VERSION
    assert info.details["engine_version"] == double.VERSION and info.details["trust_remote_code"] is False
    assert engine.count_tokens(PROMPTS) == [len(x) for x in _ids(engine, PROMPTS)]
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate(PROMPTS, DecodingSettings(beam_width=1, max_new_tokens=4))


def test_tokenizer_resolution(tmp_path: Path, trt: Recorder) -> None:
    bare = make_engine_dir(tmp_path / "bare")
    with pytest.raises(EngineError, match=r"no tokenizer in the folder.*--tokenizer DIR"):
        TrtllmEngine(bare)
    with pytest.raises(EngineError, match=r"--tokenizer .*nope: not a folder"):
        TrtllmEngine(bare, options=EngineOptions(tokenizer=str(tmp_path / "nope")))
    with pytest.raises(EngineError, match=r"--tokenizer .*: holds none of"):
        TrtllmEngine(bare, options=EngineOptions(tokenizer=str(tmp_path)))
    own = TrtllmEngine(make_engine_dir(tmp_path / "own", with_tokenizer=True))  # the engine's own
    assert own.info.details["tokenizer"] == str(tmp_path / "own")


def test_end_and_pad_ids_from_options(tmp_path: Path, trt: Recorder) -> None:
    engine = TrtllmEngine(
        make_engine_dir(tmp_path / "e"),
        options=EngineOptions(tokenizer=str(BUNDLED_MODEL), end_id=5, pad_id=0),
    )
    engine.generate(PROMPTS[:1], DecodingSettings(beam_width=1, max_new_tokens=4))
    assert trt.calls[0]["end_id"] == 5 and trt.calls[0]["pad_id"] == 0


def test_trust_remote_code_only_when_asked(
    tmp_path: Path, trt: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers

    seen: list[object] = []
    real = transformers.AutoTokenizer.from_pretrained

    def spy(folder: str, **kwargs: Any) -> Any:
        seen.append(kwargs.get("trust_remote_code", "absent"))
        return real(folder, **kwargs)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", spy)
    path = make_engine_dir(tmp_path / "e")
    TrtllmEngine(path, options=TOKENIZER)
    TrtllmEngine(path, options=EngineOptions(tokenizer=str(BUNDLED_MODEL), trust_remote_code=True))
    assert seen == [False, True]
    cfg = RunConfig.from_options({"tokenizer": str(BUNDLED_MODEL)})
    assert cfg.engine_options.trust_remote_code is False
    assert RunConfig.from_options({"trust_remote_code": True}).engine_options.trust_remote_code


def test_engine_directory_problems(tmp_path: Path, trt: Recorder) -> None:
    path = make_engine_dir(tmp_path / "e", with_tokenizer=True)
    (path / "rank0.engine").unlink()
    with pytest.raises(EngineError, match=r"no \*\.engine files.*trtllm-build --output_dir"):
        TrtllmEngine(path)
    config = json.loads((path / "config.json").read_text())
    del config["build_config"]["max_batch_size"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngineError, match="missing key 'build_config.max_batch_size'"):
        TrtllmEngine(path)
    with pytest.raises(ConfigError, match="--trtllm-runtime"):
        RunConfig.from_options({"trtllm_runtime": "gpu"})


def test_pipeline_refused_cells_fail_with_the_message_others_pass(
    tmp_path: Path, small_dataset: Path, trt: Recorder
) -> None:
    engine = make_engine_dir(tmp_path / "e", max_beam_width=1)
    result = run_pipeline(run_config(tmp_path, small_dataset, engine, batch_sizes="1,2,4", beam_widths="1,2"))
    assert result.report.engine.backend == "trtllm"
    cells = {c.cell.id: c for c in result.report.cells}
    for size in (1, 2, 4):
        assert cells[f"bs{size}-beam1"].verdict == "pass" and cells[f"bs{size}-beam1"].error is None
        refused = cells[f"bs{size}-beam2"]
        assert refused.verdict == "error"
        assert refused.error == "RuntimeError: Num beams (2) exceeds the engine or specified limit (1)"
        assert [c.name for c in refused.limit_checks if c.status == "fail"] == ["max_beam_width"]
    # one generate call per planned batch, prompts in plan order; a refused cell stops at its
    # first batch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(BUNDLED_MODEL))
    config = run_config(tmp_path, small_dataset, engine, batch_sizes="1,2,4", beam_widths="1,2")
    plan = plan_only(config).plan  # the run's plan, made again without loading the engine
    prompts = [build_prompt(config.prompt_template, d) for d in load_run_dataset(config).documents]
    expected = []
    for cell in plan.all_cells:
        batches = plan.batches(cell)
        for batch in batches[:1] if cell.beam_width == 2 else batches:
            expected.append(tokenizer([prompts[d] for d in batch.documents])["input_ids"])
    assert [c["ids"] for c in trt.calls if c["runner"] == "ModelRunnerCpp"] == expected
    report = written_report(tmp_path)
    assert report["engine"]["backend"] == "trtllm"
    assert {c["id"]: c["verdict"] for c in report["cells"]}["bs4-beam2"] == "error"


def test_pipeline_finds_corrupt_positions_through_the_adapter(
    tmp_path: Path, small_dataset: Path, trt: Recorder
) -> None:
    trt.corrupt_from = 2  # positions 2.. return -1 then garbage, as in TensorRT-LLM #2072
    engine = make_engine_dir(tmp_path / "e", max_beam_width=1)
    result = run_pipeline(run_config(tmp_path, small_dataset, engine, batch_sizes="1,4", beam_widths="1"))
    cells = {c.cell.id: c for c in result.report.cells}
    assert cells["bs1-beam1"].verdict == "pass"
    bad = cells["bs4-beam1"]
    assert bad.error is None and bad.verdict == "fail"
    assert bad.degraded_positions == (2, 3)
