"""The emulator's fault models: each damages what it models and nothing else.

calibrate relies on two of these facts (batch size 1 is untouched by every fault; stride
leaves greedy decoding alone), so they are checked here on real generations.
"""

from __future__ import annotations

import json

import pytest

from harness.config import DecodingSettings
from harness.engines.emulator.build import BuildLimits, build_engine
from harness.engines.emulator.engine import EmulatorEngine
from harness.engines.emulator.faults import Fault, hit, parse_fault
from harness.errors import ConfigError
from harness.inputs.data import build_prompt, load_dataset

GREEDY = DecodingSettings(max_new_tokens=16, beam_width=1, length_penalty=1.0)
BEAM2 = DecodingSettings(max_new_tokens=16, beam_width=2, length_penalty=1.0)


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [build_prompt("{text} TL;DR: ", d) for d in load_dataset(None).documents[:8]]


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    made: dict[str, EmulatorEngine] = {}

    def get(spec: str) -> EmulatorEngine:
        if spec not in made:
            fault = None if spec == "healthy" else parse_fault(spec, max_batch_size=8)
            path = build_engine(root / spec.replace(":", "_").replace(",", "_").replace("=", "-"),
                                BuildLimits(), fault=fault)
            made[spec] = EmulatorEngine(path)
        return made[spec]

    return get


def texts(engine: EmulatorEngine, prompts: list[str], settings: DecodingSettings) -> list[str]:
    return [g.text for g in engine.generate(prompts, settings)]


@pytest.mark.parametrize("spec", ["drift:scale=2.0", "full-batch", "padding", "stride",
                                  "partial:fraction=1.0,position=1"])
def test_no_fault_touches_batch_size_1(engines, prompts, spec):
    healthy, faulty = engines("healthy"), engines(spec)
    for settings in (GREEDY, BEAM2):
        for p in prompts[:3]:
            assert texts(faulty, [p], settings) == texts(healthy, [p], settings)


def test_full_batch_breaks_one_slot_only_when_the_batch_is_full(engines, prompts):
    healthy, faulty = engines("healthy"), engines("full-batch")
    full, clean = texts(faulty, prompts, GREEDY), texts(healthy, prompts, GREEDY)
    assert [a == b for a, b in zip(full, clean)] == [True] * 7 + [False]
    assert texts(faulty, prompts[:4], GREEDY) == texts(healthy, prompts[:4], GREEDY)
    assert json.loads((faulty.path / "config.json").read_text())["emulator"]["fault"]["kind"] == \
        "full-batch"


def test_partial_hits_its_position_on_its_prompts(engines, prompts):
    healthy, faulty = engines("healthy"), engines("partial:fraction=1.0,position=3")
    out, clean = texts(faulty, prompts, GREEDY), texts(healthy, prompts, GREEDY)
    assert [a == b for a, b in zip(out, clean)] == [True] * 3 + [False] + [True] * 4
    shares = sum(hit(f"prompt {i}", 0, 0.3) for i in range(2000)) / 2000
    assert 0.27 < shares < 0.33  # the seeded share of prompts a partial fault hits


def test_padding_spares_the_longest_prompt_of_the_batch(engines, prompts):
    healthy, faulty = engines("healthy"), engines("padding")
    lengths = healthy.count_tokens(prompts[:4])
    out, clean = texts(faulty, prompts[:4], GREEDY), texts(healthy, prompts[:4], GREEDY)
    longest = lengths.index(max(lengths))
    assert out[longest] == clean[longest]
    assert sum(a != b for i, (a, b) in enumerate(zip(out, clean)) if i != longest) >= 2


def test_stride_leaves_greedy_and_position_0_alone(engines, prompts):
    healthy, faulty = engines("healthy"), engines("stride")
    assert texts(faulty, prompts[:4], GREEDY) == texts(healthy, prompts[:4], GREEDY)
    # the fault fires once a batch-mate finishes: long enough for summaries to end
    beam = DecodingSettings(max_new_tokens=48, beam_width=2, length_penalty=1.0)
    out, clean = texts(faulty, prompts[:4], beam), texts(healthy, prompts[:4], beam)
    assert out[0] == clean[0]
    assert out[1:] != clean[1:]


def test_drift_is_seeded_and_spares_nothing_in_particular(engines, prompts):
    a, b = engines("drift:scale=2.0"), engines("drift:scale=2.0,seed=1")
    first = texts(a, prompts, GREEDY)
    assert texts(a, prompts, GREEDY) == first  # same seed, same outputs
    assert texts(b, prompts, GREEDY) != first  # another seed, another perturbation


@pytest.mark.parametrize("text, needle", [
    ("nonsense", "unknown fault 'nonsense'"),
    ("partial:position=0", "position 0 must be between 1 and 7"),
    ("partial:fraction=2", "fraction 2.0 must be in (0, 1]"),
    ("full-batch:slot=9", "slot 9 is outside the engine's 8 slots"),
    ("drift:speed=3", "'speed=3' is not a parameter of drift"),
    ("drift:scale=x", "scale must be a number"),
])
def test_bad_fault_specs_are_refused_with_the_fix(text, needle):
    with pytest.raises(ConfigError, match=None) as err:
        parse_fault(text, max_batch_size=8)
    assert needle in str(err.value)


def test_fault_round_trips_through_config():
    from harness.engines.emulator.faults import fault_from_config

    fault = Fault("partial", position=2, fraction=0.5, seed=7)
    assert fault_from_config(fault.as_dict(), "config.json") == fault
    with pytest.raises(ConfigError, match="emulator.fault must be an object"):
        fault_from_config({"kind": "gremlins"}, "config.json")
