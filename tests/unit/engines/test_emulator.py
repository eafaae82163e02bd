"""The emulator engine on the bundled model: batch invariance, the slot overflow, refusals,
and agreement with transformers' own Mistral implementation."""

from __future__ import annotations

import pytest

from harness.config import DecodingSettings
from harness.engines.emulator.engine import EmulatorEngine
from harness.inputs.data import build_prompt, load_dataset


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [build_prompt("{text} TL;DR: ", d) for d in load_dataset(None).documents[:8]]


@pytest.fixture(scope="module")
def healthy(engine_factory) -> EmulatorEngine:
    return EmulatorEngine(engine_factory(8, 4))


@pytest.mark.parametrize("beam", [1, 2, 4])
def test_every_position_equals_batch_size_one(healthy, prompts, beam):
    settings = DecodingSettings(beam_width=beam, max_new_tokens=40)
    single = [healthy.generate([p], settings)[0] for p in prompts]
    batch = healthy.generate(prompts, settings)
    assert [g.text for g in batch] == [g.text for g in single]
    assert all(len(g.beams) == beam for g in batch)
    assert all(g.text for g in batch)


def test_beam_slot_overflow_corrupts_exactly_the_positions_beyond_the_slots(engine_factory, prompts):
    engine = EmulatorEngine(engine_factory(8, 1))  # 8 beam slots
    settings = DecodingSettings(beam_width=4, max_new_tokens=40)
    assert engine.cache.slots == 8
    single = [engine.generate([p], settings)[0].text for p in prompts]  # 4 slots: fine
    batch = [g.text for g in engine.generate(prompts, settings)]
    assert batch[:2] == single[:2]  # slots 0-7
    assert all(b != s for b, s in zip(batch[2:], single[2:]))  # slots 8-31 do not exist


def test_beam_width_two_overflows_from_position_four(engine_factory, prompts):
    engine = EmulatorEngine(engine_factory(8, 1))
    settings = DecodingSettings(beam_width=2, max_new_tokens=40)
    single = [engine.generate([p], settings)[0].text for p in prompts]
    batch = [g.text for g in engine.generate(prompts, settings)]
    assert batch[:4] == single[:4]
    assert all(b != s for b, s in zip(batch[4:], single[4:]))


def test_too_long_input_is_refused_like_tensorrt_llm(healthy, prompts):
    with pytest.raises(RuntimeError, match="max_seq_len 512"):
        healthy.generate(prompts[:1], DecodingSettings(beam_width=1, max_new_tokens=500))


@pytest.mark.parametrize("beam", [1, 2])
def test_matches_transformers_at_batch_size_one(healthy, prompts, beam):
    from harness.engines.emulator.build import BUNDLED_MODEL
    from harness.engines.hf import HFEngine

    hf = HFEngine(BUNDLED_MODEL, device="cpu")
    settings = DecodingSettings(beam_width=beam, max_new_tokens=40)
    for p in prompts[:4]:
        assert healthy.generate([p], settings)[0].text == hf.generate([p], settings)[0].text
    assert hf.info.identity == healthy.info.identity  # same weights, same goldens


@pytest.mark.parametrize("error", [OSError(), ValueError("\n  \n")])
def test_a_tokenizer_error_without_a_message_is_still_one_line(engine_factory, monkeypatch,
                                                               tmp_path, error):
    """An exception whose message is empty (or blank) names its type; it used to raise
    IndexError from the message formatting, in the engine and in lint alike."""
    import transformers

    from harness.engines.registry import load_engine
    from harness.errors import EngineError
    from harness.limits.lint import lint

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fail)
    name = type(error).__name__
    with pytest.raises(EngineError, match=rf"tokenizer: cannot load the tokenizer \({name}\); "
                                          "rebuild the engine$"):
        load_engine(str(engine_factory(8, 4)))
    with pytest.raises(EngineError, match=rf"cannot load a tokenizer \({name}\)$"):
        lint(engine_factory(8, 4))
