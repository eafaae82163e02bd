"""The emulator engine on the bundled model: batch invariance, the slot overflow, refusals,
and agreement with transformers' own Mistral implementation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest
import torch

from harness.config import DecodingSettings
from harness.engines.emulator.engine import EmulatorEngine
from harness.inputs.data import build_prompt, load_dataset


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [build_prompt("{text} TL;DR: ", d) for d in load_dataset(None).documents[:8]]


@pytest.fixture(scope="module")
def healthy(engine_factory: Callable[[int, int], Path]) -> EmulatorEngine:
    return EmulatorEngine(engine_factory(8, 4))


@pytest.mark.parametrize("beam", [1, 2, 4])
def test_every_position_equals_batch_size_one(healthy: EmulatorEngine, prompts: list[str], beam: int) -> None:
    settings = DecodingSettings(beam_width=beam, max_new_tokens=40)
    single = [healthy.generate([p], settings)[0] for p in prompts]
    batch = healthy.generate(prompts, settings)
    assert [g.text for g in batch] == [g.text for g in single]
    assert all(len(g.beams) == beam for g in batch)
    assert all(g.text for g in batch)


def test_beam_slot_overflow_corrupts_exactly_the_positions_beyond_the_slots(
    engine_factory: Callable[[int, int], Path], prompts: list[str]
) -> None:
    engine = EmulatorEngine(engine_factory(8, 1))  # 8 beam slots
    settings = DecodingSettings(beam_width=4, max_new_tokens=40)
    assert engine.cache.slots == 8
    single = [engine.generate([p], settings)[0].text for p in prompts]  # 4 slots: fine
    batch = [g.text for g in engine.generate(prompts, settings)]
    assert batch[:2] == single[:2]  # slots 0-7
    assert all(b != s for b, s in zip(batch[2:], single[2:]))  # slots 8-31 do not exist


def test_beam_width_two_overflows_from_position_four(
    engine_factory: Callable[[int, int], Path], prompts: list[str]
) -> None:
    engine = EmulatorEngine(engine_factory(8, 1))
    settings = DecodingSettings(beam_width=2, max_new_tokens=40)
    single = [engine.generate([p], settings)[0].text for p in prompts]
    batch = [g.text for g in engine.generate(prompts, settings)]
    assert batch[:4] == single[:4]
    assert all(b != s for b, s in zip(batch[4:], single[4:]))


def test_too_long_input_is_refused_like_tensorrt_llm(healthy: EmulatorEngine, prompts: list[str]) -> None:
    with pytest.raises(RuntimeError, match="max_seq_len 512"):
        healthy.generate(prompts[:1], DecodingSettings(beam_width=1, max_new_tokens=500))


@pytest.mark.parametrize("beam", [1, 2])
def test_matches_transformers_at_batch_size_one(
    healthy: EmulatorEngine, prompts: list[str], beam: int
) -> None:
    from harness.engines.emulator.build import BUNDLED_MODEL
    from harness.engines.hf import HFEngine

    hf = HFEngine(BUNDLED_MODEL, device="cpu")
    settings = DecodingSettings(beam_width=beam, max_new_tokens=40)
    for p in prompts[:4]:
        assert healthy.generate([p], settings)[0].text == hf.generate([p], settings)[0].text
    assert hf.info.identity == healthy.info.identity  # same weights, same goldens


@pytest.mark.parametrize("error", [OSError(), ValueError("\n  \n")])
def test_a_tokenizer_error_without_a_message_is_still_one_line(
    engine_factory: Callable[[int, int], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    error: Exception,
) -> None:
    """An exception whose message is empty (or blank) names its type; it used to raise
    IndexError from the message formatting, in the engine and in lint alike."""
    import transformers

    from harness.engines.registry import load_engine
    from harness.errors import EngineError
    from harness.tools.lint import lint

    def fail(*args: object, **kwargs: object) -> NoReturn:
        raise error

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fail)
    name = type(error).__name__
    with pytest.raises(
        EngineError,
        match=rf"tokenizer: cannot load the tokenizer \({name}\); "
        "rebuild the engine$",
    ):
        load_engine(str(engine_factory(8, 4)))
    with pytest.raises(EngineError, match=rf"cannot load a tokenizer \({name}\)$"):
        lint(engine_factory(8, 4))


def test_a_prompt_phase_is_computed_once_per_engine_and_reused(
    engine_factory: Callable[[int, int], Path], prompts: list[str]
) -> None:
    """The prompt phase depends on the prompt only: a second batch with the same prompts at
    other positions computes none, and gives what an engine that never saw them gives."""
    from harness.engines.emulator.model import Prefill, PrefillCache

    engine = EmulatorEngine(engine_factory(8, 4))
    settings = DecodingSettings(beam_width=2, max_new_tokens=24)
    first = engine.generate(prompts[:4], settings)
    assert len(engine.prefills) == 4
    calls: list[torch.Tensor] = []
    real = engine.model.prefill

    def counted(ids: torch.Tensor) -> Prefill:
        calls.append(ids)
        return real(ids)

    engine.model.prefill = counted  # type: ignore[method-assign]  # counts the prompt phases
    again = engine.generate(prompts[:4][::-1], settings)
    assert calls == [] and len(engine.prefills) == 4
    assert [g.token_ids for g in again] == [g.token_ids for g in first][::-1]
    fresh = EmulatorEngine(engine_factory(8, 4)).generate(prompts[:4][::-1], settings)
    assert [g.token_ids for g in again] == [g.token_ids for g in fresh]

    small = PrefillCache(engine.model, max_bytes=1)  # holds the newest prompt only
    ids = engine.tokenizer(prompts[:2])["input_ids"]
    one = small.get(ids[0])
    small.get(ids[1])
    assert len(small) == 1 and small.get(ids[0]) is not one
    assert torch.equal(small.get(ids[0]).logits, one.logits)


def test_a_slot_holds_nothing_from_an_earlier_batch(tmp_path: Path, prompts: list[str]) -> None:
    """The stride fault reads other entries' beam slots past their prompts: what it finds
    there is zeros, never what an earlier batch (longer prompts, longer outputs) left."""
    from harness.engines.emulator.build import build_engine, build_limits
    from harness.engines.emulator.faults import Fault, FaultKind

    path = build_engine(tmp_path / "stride", build_limits(), fault=Fault(FaultKind.STRIDE))
    settings = DecodingSettings(beam_width=2, max_new_tokens=48)
    by_length = sorted(prompts, key=len)
    short, long = by_length[:4], by_length[4:]
    fresh = EmulatorEngine(path).generate(short, settings)
    used = EmulatorEngine(path)
    used.generate(long, settings)
    used.generate(long[::-1], settings)
    assert [g.token_ids for g in used.generate(short, settings)] == [g.token_ids for g in fresh]
    k = used.cache.k[:, : 4 * 2]
    lengths = used.count_tokens(short)
    assert all(not k[:, 2 * s : 2 * s + 2, :, n + 48 :].any() for s, n in enumerate(lengths))


def test_float32_gives_float64s_outputs_on_the_bundled_model(tmp_path: Path, prompts: list[str]) -> None:
    """The default compute dtype (float32, about 1.25x faster on two cores) changes no output
    of the bundled model: the same tokens as float64 at batch size 8 for every beam width."""
    from harness.engines.emulator import DEFAULT_COMPUTE_DTYPE
    from harness.engines.emulator.build import build_engine, build_limits

    assert DEFAULT_COMPUTE_DTYPE == "float32"
    engines = {
        d: EmulatorEngine(build_engine(tmp_path / d, build_limits(), compute_dtype=d))
        for d in ("float32", "float64")
    }
    assert engines["float32"].cache.k.dtype == torch.float32
    for beam in (1, 2, 4):
        settings = DecodingSettings(beam_width=beam, max_new_tokens=40)
        got = {d: [g.token_ids for g in e.generate(prompts, settings)] for d, e in engines.items()}
        assert got["float32"] == got["float64"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_fused_norm_and_rotary_embedding_equal_their_textbook_formulas(
    tmp_path: Path, dtype: str
) -> None:
    """One op for RMSNorm and a swapped-halves rotary embedding from a table: bit for bit the
    formulas the emulator used before (x * rsqrt(mean(x^2) + eps) * w; x * cos +
    rotate_half(x) * sin, cos and sin computed at the positions)."""
    from harness.engines.emulator.build import build_engine, build_limits
    from harness.engines.emulator.model import _rotate

    model = EmulatorEngine(build_engine(tmp_path / dtype, build_limits(), compute_dtype=dtype)).model
    gen = torch.Generator().manual_seed(3)
    for rows in (1, 3, 8, 32):
        x = (torch.randn(rows, model.shape.hidden_size, generator=gen) * 3).to(model.dtype)
        w = model.layers[0]["ln1"]
        want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + model.shape.rms_norm_eps) * w
        assert torch.equal(model._rms(x, w), want)
        positions = torch.randint(0, 500, (rows,), generator=gen)
        emb = torch.cat([positions.to(torch.float64)[:, None] * model.inv_freq] * 2, dim=-1)
        cos, sin = emb.cos().to(model.dtype)[:, None], emb.sin().to(model.dtype)[:, None]
        q = torch.randn(rows, 8, model.shape.head_size, generator=gen).to(model.dtype)
        half = q.shape[-1] // 2
        textbook = q * cos + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin
        table_cos, table_sin = model._rope(positions)
        assert torch.equal(_rotate(q, table_cos[:, None], table_sin[:, None]), textbook)
