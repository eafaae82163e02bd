"""The adapter contract, run against the TEST DOUBLE of every TensorRT-LLM release line.

The same assertions for each line (tests/doubles/lines.py): an engine of that line loads;
greedy and beam cells give every position its own output, in position order, with every beam
kept; a beam width above the engine's maximum fails only its cell, with that line's own
message and exception type; a smaller beam width works; close frees what the line holds.
The doubles are not TensorRT-LLM: each says which release source it was read from.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

import pytest

from harness.config import DecodingSettings, EngineOptions
from harness.engines.llmapi import LlmApiEngine
from harness.engines.trtllm import TrtllmEngine
from harness.errors import EngineError
from harness.model.vocab import TrtllmRuntime, Verdict
from tests.doubles import trtllm_common as common
from tests.doubles.trtllm_common import BUNDLED_MODEL, continuation
from tests.unit.engines.pipeline_runs import run_config, run_pipeline, written_report

PROMPTS = [
    "A short one. TL;DR: ",
    "A much longer prompt, with many more words in it than the first one has, so that "
    "the batch holds prompts of different lengths. TL;DR: ",
    "Middle length prompt here, some words. TL;DR: ",
]
LLMAPI_LINES = {"0.15-0.16", "1.x"}  # the lines whose SamplingParams has use_beam_search/n/best_of
# what each line's LLM API says for a beam width of 4 on an engine built with max_beam_width 2
LLMAPI_REFUSAL = {
    "0.15-0.16": "ValueError: sampling_params's beam_width (4) should not exceed max_beam_width (2)",
    "1.x": "ValueError: sampling_params.n (4) cannot exceed max_beam_width (2) when use_beam_search is True",
}
RUNTIMES = ["cpp", "python"]
EXECUTOR_LINES = {"0.12-0.13", "0.15-0.16", "1.x"}  # whose ModelRunnerCpp holds an Executor: in-flight


@runtime_checkable
class BeamFields(Protocol):
    """What the beam-search checks read of a SamplingParams."""

    n: int
    best_of: int | None
    use_beam_search: bool


def _engine(trt: ModuleType, tmp_path: Path, runtime: str = "cpp", max_beam_width: int = 4) -> TrtllmEngine:
    path = trt.make_engine_dir(tmp_path / "e", max_beam_width=max_beam_width, max_batch_size=8)
    return TrtllmEngine(
        path, options=EngineOptions(tokenizer=str(BUNDLED_MODEL), trtllm_runtime=TrtllmRuntime(runtime))
    )


def _expected(tokenizer: Any, prompts: list[str], beams: int, new: int) -> list[tuple[str, ...]]:
    out = []
    for ids in tokenizer(prompts)["input_ids"]:
        out.append(
            tuple(
                tokenizer.decode(continuation(list(ids), k, new, 2), skip_special_tokens=True).strip()
                for k in range(beams)
            )
        )
    return out


def _check_cell(engine: TrtllmEngine | LlmApiEngine, prompts: list[str], beams: int, new: int = 8) -> None:
    gens = engine.generate(prompts, DecodingSettings(beam_width=beams, max_new_tokens=new))
    assert [g.beams for g in gens] == _expected(engine.tokenizer, prompts, beams, new)
    assert [g.text for g in gens] == [g.beams[0] for g in gens]


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"


# --- the trtllm backend -----------------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_cell_runs_on_every_line(tmp_path: Path, trt_line: ModuleType, runtime: str) -> None:
    """Greedy, a smaller beam width and the engine's own, in the order the plan runs them
    (on 0.12-0.13 in-flight batching refuses a width other than the executor's maximum)."""
    engine = _engine(trt_line, tmp_path, runtime)
    assert engine.info.details["tensorrt_llm"] == trt_line.VERSION
    for beams in (1, 2, 4, 1, 2):
        _check_cell(engine, PROMPTS, beams)
    assert common.recorder().ignored == []  # no keyword the runner drops silently


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_beam_width_above_the_engine_fails_only_its_cell(
    tmp_path: Path, trt_line: ModuleType, runtime: str
) -> None:
    engine = _engine(trt_line, tmp_path, runtime, max_beam_width=2)
    with pytest.raises(RuntimeError) as exc:
        engine.generate(PROMPTS, DecodingSettings(beam_width=4, max_new_tokens=8))
    assert _error(exc.value) == "RuntimeError: Num beams (4) exceeds the engine or specified limit (2)"
    _check_cell(engine, PROMPTS, 1)  # the engine still runs the next cell
    _check_cell(engine, PROMPTS, 2)


def test_cpp_outputs_are_cut_for_the_line_s_beam_layout(tmp_path: Path, trt_line: ModuleType) -> None:
    """[batch, max_beam_width, ...] with empty unused beams (to 0.13) or [batch, num_beams, ...]
    (later): either way each prompt gets exactly the beams asked for, none empty."""
    engine = _engine(trt_line, tmp_path)
    gens = engine.generate(PROMPTS[:2], DecodingSettings(beam_width=2, max_new_tokens=8))
    assert [len(g.beams) for g in gens] == [2, 2] and all(all(g.beams) for g in gens)
    assert [g.token_ids for g in gens] == [
        tuple(continuation(list(ids), 0, 8, 2)) for ids in engine.tokenizer(PROMPTS[:2])["input_ids"]
    ]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_close_frees_the_runner(tmp_path: Path, trt_line: ModuleType, runtime: str) -> None:
    engine = _engine(trt_line, tmp_path, runtime)
    _check_cell(engine, PROMPTS[:1], 2)
    runner = engine.runner
    engine.close()
    assert engine.runner is None
    session = getattr(runner, "session", None)
    if hasattr(session, "shutdown"):  # the Executor (0.10 on) is shut down, not left to the GC
        assert session is not None  # hasattr(None, "shutdown") is False
        assert session.alive is False
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate(PROMPTS, DecodingSettings(beam_width=1, max_new_tokens=4))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_default_grid_on_a_beam_4_engine_runs_and_passes_on_every_line(
    tmp_path: Path, small_dataset: Path, trt_line: ModuleType, runtime: str
) -> None:
    """A healthy engine built with max_beam_width 4, the default grid (batch sizes 1, 2, 4, 8;
    beam widths 1, 2, 4): every cell runs and passes on every line and runner, though 0.9's
    decoder is fixed at load (C++) or by the first call (Python) and 0.12-0.13's executor
    refuses other widths; the bulk cells load one runner per beam width, each once, and the
    scheduled cells load each again where the runner has an in-flight path (the C++ runner's
    Executor), where they pass too; never two engines on the GPU."""
    engine = trt_line.make_engine_dir(tmp_path / "e", max_beam_width=4, max_batch_size=8)
    result = run_pipeline(run_config(tmp_path, small_dataset, engine, trtllm_runtime=runtime))
    assert [(c.cell.batch_size, c.cell.beam_width) for c in result.report.cells] == [
        (b, w) for w in (1, 2, 4) for b in (1, 2, 4, 8)
    ]
    assert {c.cell.id: c.error for c in result.report.cells if c.error} == {}
    assert {c.cell.id: c.verdict for c in result.report.cells} == {
        c.cell.id: "pass" for c in result.report.cells
    }
    in_flight = runtime == "cpp" and trt_line.LINE in EXECUTOR_LINES
    assert [c.verdict for c in result.report.schedules] == [
        Verdict.PASS if in_flight else Verdict.NOT_APPLICABLE for _ in result.report.schedules
    ], [c.message for c in result.report.schedules]
    loads = common.recorder().loads
    # the bulk cells load each width in turn; the schedules start from the widest, still loaded
    widths = [1, 2, 4] + ([2, 1] if in_flight else [])
    assert len(loads) == len(widths) and common.recorder().gpu.loads == len(widths), [
        load.get("max_beam_width") for load in loads
    ]
    if runtime == "cpp":
        assert [load["max_beam_width"] for load in loads] == widths


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_runner_is_released_before_the_next_loads(
    tmp_path: Path, trt_line: ModuleType, runtime: str
) -> None:
    """The doubles' GPU holds one engine: a load while another runner is alive fails. A failed
    cell's error, kept as the pipeline keeps it, must not hold the runner either."""
    import weakref

    engine = _engine(trt_line, tmp_path, runtime)
    kept: list[BaseException] = []
    runners = []
    for beams in (1, 2, 4):
        with pytest.raises(RuntimeError) as exc:  # a batch above the engine's max_batch_size
            engine.generate(PROMPTS * 3, DecodingSettings(beam_width=beams, max_new_tokens=8))
        kept.append(exc.value)
        runners.append(weakref.ref(engine.runner))
        _check_cell(engine, PROMPTS, beams)
        assert common.recorder().gpu.engines() == 1
    assert [r() is None for r in runners] == [True, True, False]
    engine.close()
    assert runners[-1]() is None and common.recorder().gpu.engines() == 0


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_kv_cache_reuse_is_asked_off_and_reported(tmp_path: Path, trt_line: ModuleType, runtime: str) -> None:
    from harness.model.vocab import CacheReuse

    engine = _engine(trt_line, tmp_path, runtime)
    assert engine.info.kv_cache_reuse.setting == CacheReuse.OFF
    takes_it = runtime == "cpp" and trt_line.LINE != "0.9"  # from_dir(kv_cache_enable_block_reuse)
    assert [load.get("kv_cache_enable_block_reuse") for load in common.recorder().loads] == [
        False if takes_it else None
    ]
    engine.close()
    options = EngineOptions(
        tokenizer=str(BUNDLED_MODEL), trtllm_runtime=TrtllmRuntime(runtime), kv_cache_reuse=CacheReuse.ON
    )
    if not takes_it:
        with pytest.raises(
            EngineError,
            match=r"^--kv-cache-reuse on: TensorRT-LLM .* has no "
            r"kv_cache_enable_block_reuse",
        ):
            TrtllmEngine(tmp_path / "e", options=options)
        return
    engine = TrtllmEngine(tmp_path / "e", options=options)
    assert engine.info.kv_cache_reuse.setting == CacheReuse.ON
    assert common.recorder().loads[-1]["kv_cache_enable_block_reuse"] is True


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_legacy_engines_are_refused_in_one_line_on_every_line(
    tmp_path: Path, trt_line: ModuleType, runtime: str
) -> None:
    """0.5-0.8 engines were built with another TensorRT (0.8.0 pins 9.2, 0.9.0 pins 9.3, 0.13
    pins 10.3: requirements.txt): none of these releases can deserialize them."""
    path = common.make_legacy_engine_dir(tmp_path / "legacy", max_beam_width=2)
    with pytest.raises(EngineError) as exc:
        TrtllmEngine(
            path, options=EngineOptions(tokenizer=str(BUNDLED_MODEL), trtllm_runtime=TrtllmRuntime(runtime))
        )
    text = str(exc.value)
    assert "\n" not in text and "0.5-0.8 engine" in text and f"TensorRT-LLM {trt_line.VERSION}" in text
    assert "rebuild it" in text and "--trtllm-runtime" not in text
    assert common.recorder().loads == []  # refused before anything is loaded


def test_pipeline_every_line_refuses_only_the_too_wide_cells(
    tmp_path: Path, small_dataset: Path, trt_line: ModuleType
) -> None:
    engine = trt_line.make_engine_dir(tmp_path / "e", max_beam_width=2, max_batch_size=8)
    result = run_pipeline(run_config(tmp_path, small_dataset, engine, batch_sizes="1,4", beam_widths="1,2,4"))
    cells = {c.cell.id: c for c in result.report.cells}
    for size in (1, 4):
        for beams in (1, 2):
            assert cells[f"bs{size}-beam{beams}"].verdict == "pass", cells[f"bs{size}-beam{beams}"].error
        assert cells[f"bs{size}-beam4"].error == (
            "RuntimeError: Num beams (4) exceeds the engine or specified limit (2)"
        )


# --- the llmapi backend -----------------------------------------------------------------------


def _llmapi(trt: ModuleType, tmp_path: Path, max_beam_width: int = 4) -> LlmApiEngine:
    path = trt.make_engine_dir(tmp_path / "e", max_beam_width=max_beam_width, max_batch_size=8)
    return LlmApiEngine(path, options=EngineOptions(tokenizer=str(BUNDLED_MODEL)))


def test_llmapi_lines_without_beam_sampling_params_are_refused_clearly(
    tmp_path: Path, trt_line: ModuleType
) -> None:
    if trt_line.LINE in LLMAPI_LINES:
        pytest.skip("this line has the LLM API's beam-search SamplingParams")
    with pytest.raises(EngineError) as exc:
        _llmapi(trt_line, tmp_path)
    assert "needs TensorRT-LLM 0.15 or later" in str(exc.value)
    assert f"this is {trt_line.VERSION}" in str(exc.value) and "--backend trtllm" in str(exc.value)


@pytest.fixture
def llmapi_line(trt_line: ModuleType) -> ModuleType:
    if trt_line.LINE not in LLMAPI_LINES:
        pytest.skip(f"TensorRT-LLM {trt_line.VERSION} has no LLM API with beam-search SamplingParams")
    return trt_line


def test_llmapi_engine_dir_runs_every_cell(tmp_path: Path, llmapi_line: ModuleType) -> None:
    engine = _llmapi(llmapi_line, tmp_path)
    assert len(common.recorder().loads) == 1  # an engine directory is loaded once
    for beams in (1, 2, 4, 1):
        _check_cell(engine, PROMPTS, beams)


@pytest.mark.parametrize("asked", ["off", "on"])
def test_llmapi_kv_cache_reuse_is_what_was_asked_whatever_the_line_s_default(
    tmp_path: Path, llmapi_line: ModuleType, asked: str
) -> None:
    """1.x's KvCacheConfig turns block reuse on by default (llm_args.py): the harness passes
    its setting on every line, and the report says which."""
    from harness.model.vocab import CacheReuse

    path = llmapi_line.make_engine_dir(tmp_path / "e", max_beam_width=4, max_batch_size=8)
    engine = LlmApiEngine(
        path, options=EngineOptions(tokenizer=str(BUNDLED_MODEL), kv_cache_reuse=CacheReuse(asked))
    )
    assert [load["block_reuse"] for load in common.recorder().loads] == [asked == "on"]
    assert engine.info.kv_cache_reuse.setting == CacheReuse(asked)
    assert "enable_block_reuse" in engine.info.kv_cache_reuse.how


def test_llmapi_beam_width_above_the_engine_fails_with_the_line_s_message(
    tmp_path: Path, llmapi_line: ModuleType
) -> None:
    engine = _llmapi(llmapi_line, tmp_path, max_beam_width=2)
    with pytest.raises(Exception) as exc:
        engine.generate(PROMPTS, DecodingSettings(beam_width=4, max_new_tokens=8))
    assert _error(exc.value) == LLMAPI_REFUSAL[llmapi_line.LINE]
    _check_cell(engine, PROMPTS, 2)


def test_llmapi_checkpoint_runs_every_beam_width(llmapi_line: ModuleType) -> None:
    """A checkpoint gets an LLM per beam width: build_config.max_beam_width on 0.15/0.16 (LlmArgs
    has no max_beam_width), max_beam_width plus the 1.0 PyTorch-backend beam-search settings
    (disable_overlap_scheduler=True, cuda_graph_config=None) on 1.x."""
    engine = LlmApiEngine(BUNDLED_MODEL)
    for beams in (1, 2, 2, 4, 1):
        _check_cell(engine, PROMPTS[:2], beams)
    loads = common.recorder().loads
    widths = [
        load["build_config"].max_beam_width if "build_config" in load else load["max_beam_width"]
        for load in loads
    ]
    assert widths == [1, 2, 4, 1]
    assert common.recorder().shutdowns == 3  # each replaced LLM was shut down
    engine.close()
    assert common.recorder().shutdowns == 4


def test_llmapi_close_frees_the_llm(tmp_path: Path, llmapi_line: ModuleType) -> None:
    """0.15/0.16's LLM has only _shutdown(); 1.x has shutdown()."""
    engine = _llmapi(llmapi_line, tmp_path)
    _check_cell(engine, PROMPTS[:1], 1)
    engine.close()
    assert common.recorder().shutdowns == 1
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate(PROMPTS[:1], DecodingSettings(beam_width=1, max_new_tokens=4))


def test_llmapi_sampling_params_pass_the_line_s_own_checks(
    tmp_path: Path, llmapi_line: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Greedy is best_of 1 (greedy with best_of > 1 is refused without
    TLLM_ALLOW_N_GREEDY_DECODING) and beam width W is best_of == n == W (best_of < n is refused)."""
    monkeypatch.delenv("TLLM_ALLOW_N_GREEDY_DECODING", raising=False)
    engine = _llmapi(llmapi_line, tmp_path)
    for beams in (1, 3):
        sp = engine.sampling(DecodingSettings(beam_width=beams, max_new_tokens=4))
        assert isinstance(sp, BeamFields)
        assert (sp.n, sp.best_of, sp.use_beam_search) == (beams, beams, beams > 1)


def test_llmapi_pipeline_refusal_reaches_the_cell(
    tmp_path: Path, small_dataset: Path, llmapi_line: ModuleType
) -> None:
    engine = llmapi_line.make_engine_dir(tmp_path / "e", max_beam_width=2, max_batch_size=8)
    config = run_config(
        tmp_path, small_dataset, engine, backend="llmapi", batch_sizes="1,4", beam_widths="1,2,4"
    )
    result = run_pipeline(config)
    cells = {c.cell.id: c for c in result.report.cells}
    assert cells["bs4-beam1"].verdict == cells["bs4-beam2"].verdict == "pass"
    assert cells["bs4-beam4"].error == LLMAPI_REFUSAL[llmapi_line.LINE]
    assert written_report(tmp_path)["engine"]["details"]["tensorrt_llm"] == llmapi_line.VERSION
