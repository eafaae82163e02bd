"""The emulator's fault models: each damages what it models and nothing else.

calibrate relies on two of these facts (batch size 1 is untouched by every fault; stride
leaves greedy decoding alone), so they are checked here on real generations. Benign drift
(drift.py) is checked for what makes it benign: batch size 1 untouched, the rate asked for,
the same output for a prompt in the same batch shape at any position, quality against the
references unchanged; and it composes with every fault.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Protocol

import pytest

from harness.config import DecodingSettings
from harness.engines.emulator.build import build_engine, build_limits
from harness.engines.emulator.engine import EmulatorEngine
from harness.engines.emulator.faults import Fault, FaultKind, hit, parse_drift, parse_fault
from harness.errors import ConfigError
from harness.inputs.data import build_prompt, load_dataset
from harness.model.dataset import Document
from harness.model.limits import EngineLimits

GREEDY = DecodingSettings(max_new_tokens=16, beam_width=1, length_penalty=1.0)
BEAM2 = DecodingSettings(max_new_tokens=16, beam_width=2, length_penalty=1.0)
# drift places its flip at 40-80% of the batch-size-1 output: long enough for near-ties there
DRIFT = DecodingSettings(max_new_tokens=24, beam_width=1, length_penalty=1.0)
DRIFT_BEAM = DecodingSettings(max_new_tokens=24, beam_width=2, length_penalty=1.0)
QUALITY_BAND = 0.03  # |mean ROUGE-L vs references at bs4 - at bs1| on 16 prompts, every output flipped


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [build_prompt("{text} TL;DR: ", d) for d in load_dataset(None).documents[:8]]


class Engines(Protocol):
    """The ``engines`` fixture: an engine with fault ``spec``, optional drift, and limits."""

    def __call__(
        self, spec: str, drift: str | None = None, limits: EngineLimits | None = None
    ) -> EmulatorEngine: ...


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Engines:
    root = tmp_path_factory.mktemp("faults")
    made: dict[str, EmulatorEngine] = {}

    def get(spec: str, drift: str | None = None, limits: EngineLimits | None = None) -> EmulatorEngine:
        limits = limits or build_limits()
        key = f"{spec}+{drift}+{limits.max_beam_width}"
        if key not in made:
            fault = None if spec == "healthy" else parse_fault(spec, max_batch_size=8)
            name = "".join(c if c.isalnum() else "_" for c in key)
            path = build_engine(root / name, limits, fault=fault, drift=parse_drift(drift) if drift else None)
            made[key] = EmulatorEngine(path)
        return made[key]

    return get


def _summary(doc: Document) -> str:
    assert doc.summary is not None  # every bundled document has its reference summary
    return doc.summary


def texts(engine: EmulatorEngine, prompts: list[str], settings: DecodingSettings) -> list[str]:
    return [g.text for g in engine.generate(prompts, settings)]


DAMAGE = [
    "full-batch",
    "padding",
    "stride",
    "partial:fraction=1.0,position=1",
    "truncate",
    "late-loss:fraction=1.0",
]


@pytest.mark.parametrize(
    "spec, drift", [("drift:rate=1.0", None)] + [(s, None) for s in DAMAGE] + [(s, "1.0") for s in DAMAGE]
)
def test_no_fault_touches_batch_size_1(
    engines: Engines, prompts: list[str], spec: str, drift: str | None
) -> None:
    healthy, faulty = engines("healthy"), engines(spec, drift)
    for settings in (GREEDY, BEAM2):
        for p in prompts[:3]:
            assert texts(faulty, [p], settings) == texts(healthy, [p], settings)


def test_full_batch_breaks_one_slot_only_when_the_batch_is_full(engines: Engines, prompts: list[str]) -> None:
    healthy, faulty = engines("healthy"), engines("full-batch")
    full, clean = texts(faulty, prompts, GREEDY), texts(healthy, prompts, GREEDY)
    assert [a == b for a, b in zip(full, clean)] == [True] * 7 + [False]
    assert texts(faulty, prompts[:4], GREEDY) == texts(healthy, prompts[:4], GREEDY)
    assert json.loads((faulty.path / "config.json").read_text())["emulator"]["fault"]["kind"] == "full-batch"


def test_partial_hits_its_position_on_its_prompts(engines: Engines, prompts: list[str]) -> None:
    healthy, faulty = engines("healthy"), engines("partial:fraction=1.0,position=3")
    out, clean = texts(faulty, prompts, GREEDY), texts(healthy, prompts, GREEDY)
    assert [a == b for a, b in zip(out, clean)] == [True] * 3 + [False] + [True] * 4
    shares = sum(hit(f"prompt {i}", 0, 0.3) for i in range(2000)) / 2000
    assert 0.27 < shares < 0.33  # the seeded share of prompts a partial fault hits


def test_padding_spares_the_longest_prompt_of_the_batch(engines: Engines, prompts: list[str]) -> None:
    healthy, faulty = engines("healthy"), engines("padding")
    lengths = healthy.count_tokens(prompts[:4])
    out, clean = texts(faulty, prompts[:4], GREEDY), texts(healthy, prompts[:4], GREEDY)
    longest = lengths.index(max(lengths))
    assert out[longest] == clean[longest]
    assert sum(a != b for i, (a, b) in enumerate(zip(out, clean)) if i != longest) >= 2


def test_stride_leaves_greedy_and_position_0_alone(engines: Engines, prompts: list[str]) -> None:
    healthy, faulty = engines("healthy"), engines("stride")
    assert texts(faulty, prompts[:4], GREEDY) == texts(healthy, prompts[:4], GREEDY)
    # the fault fires once a batch-mate finishes: long enough for summaries to end
    beam = DecodingSettings(max_new_tokens=48, beam_width=2, length_penalty=1.0)
    out, clean = texts(faulty, prompts[:4], beam), texts(healthy, prompts[:4], beam)
    assert out[0] == clean[0]
    assert out[1:] != clean[1:]


def test_drift_is_seeded_and_spares_nothing_in_particular(engines: Engines, prompts: list[str]) -> None:
    a, b = engines("drift:rate=0.5"), engines("drift:rate=0.5,seed=1")
    first = texts(a, prompts, DRIFT)
    assert texts(a, prompts, DRIFT) == first  # same seed, same outputs
    assert texts(b, prompts, DRIFT) != first  # another seed, other sequences flip


@pytest.mark.parametrize(
    "text, needle",
    [
        ("nonsense", "unknown fault 'nonsense'"),
        ("partial:position=0", "position 0 must be between 1 and 7"),
        ("partial:fraction=2", "fraction 2.0 must be in (0, 1]"),
        ("full-batch:slot=9", "slot 9 is outside the engine's 8 slots"),
        ("drift:speed=3", "'speed=3' is not a parameter of drift"),
        ("drift:rate=x", "rate must be a number"),
        ("drift:scale=2", "'scale=2' is not a parameter of drift"),
        ("drift:rate=1.5", "rate 1.5 must be in (0, 1]"),
        ("truncate:keep=1.2", "keep 1.2 must be in (0, 1)"),
        ("truncate:slot=1", "'slot=1' is not a parameter of truncate"),
        ("late-loss:loss=1", "loss 1.0 must be in (0, 1)"),
        ("late-loss:fraction=0", "fraction 0.0 must be in (0, 1]"),
    ],
)
def test_bad_fault_specs_are_refused_with_the_fix(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        parse_fault(text, max_batch_size=8)
    assert needle in str(err.value)


def test_fault_round_trips_through_config() -> None:
    from harness.engines.emulator.faults import fault_from_config

    fault = Fault(FaultKind.PARTIAL, position=2, fraction=0.5, seed=7)
    assert fault_from_config(fault.as_dict(), "config.json") == fault
    with pytest.raises(ConfigError, match="emulator.fault must be an object"):
        fault_from_config({"kind": "gremlins"}, "config.json")


def rotation(
    engine: EmulatorEngine, prompts: list[str], size: int, settings: DecodingSettings
) -> list[list[str]]:
    """outputs[position][prompt] over the full rotation of ``prompts`` at batch size ``size``."""
    n = len(prompts)
    out = [[""] * n for _ in range(size)]
    for k in range(n):
        docs = [(k + j) % n for j in range(size)]
        for pos, gen in enumerate(engine.generate([prompts[d] for d in docs], settings)):
            out[pos][docs[pos]] = gen.text
    return out


def test_drift_rate_is_the_share_of_outputs_that_differ(engines: Engines, prompts: list[str]) -> None:
    """Realized share over the full rotation of 8 prompts at batch size 4 (32 outputs, seeded):
    within 0.25 of the rate (binomial spread, plus prompts that share a batch shape)."""
    engine = engines("drift:rate=0.5")
    single = [texts(engine, [p], DRIFT)[0] for p in prompts]
    out = rotation(engine, prompts, 4, DRIFT)
    share = sum(row[d] != single[d] for row in out for d in range(len(prompts))) / 32
    assert 0.25 <= share <= 0.75


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.6])
def test_drift_flips_the_share_asked_for_independently_of_position(rate: float) -> None:
    """The decision to flip is a hash of the prompt and the batch shape, never the position."""
    from harness.engines.emulator.drift import Drift

    drift = Drift(rate=rate, seed=3)
    draws = [
        drift.placement(f"prompt {i}", b, w, 100 + i % 7) for i in range(1500) for b, w in ((2, 1), (8, 2))
    ]
    share = sum(x is not None for x in draws) / len(draws)
    assert abs(share - rate) < 0.03
    assert all(0.4 <= x <= 0.8 for x in draws if x is not None)
    assert drift.placement("prompt 1", 1, 1, 100) is None  # batch size 1: never


def test_a_flip_lies_in_the_last_60_percent_of_the_batch_size_1_output() -> None:
    """The near-tie a flip takes: the first at or after its placement, else the last one
    between 40% of the length and there, never an earlier one (an early near-tie reorders
    whole clauses: on the bundled set such flips moved ROUGE-L by up to 0.3 per prompt)."""
    from harness.engines.emulator.drift import Trace

    trace = Trace(output=tuple(range(20)), ties=(0, 3, 9, 12, 17))  # 40% of 20 tokens: step 8
    assert trace.flip_step(0.5) == 12  # first near-tie at or after step 10
    assert trace.flip_step(0.8) == 17  # first at or after step 16
    assert Trace(tuple(range(20)), (0, 3, 9)).flip_step(0.7) == 9  # last between 8 and 14
    assert Trace(tuple(range(20)), (0, 3, 7)).flip_step(0.5) is None  # all before 40%: none
    assert Trace(tuple(range(20)), ()).flip_step(0.5) is None


@pytest.mark.parametrize("settings", [DRIFT, DRIFT_BEAM], ids=["greedy", "beam2"])
def test_drift_gives_a_prompt_the_same_output_at_every_position(
    engines: Engines, prompts: list[str], settings: DecodingSettings
) -> None:
    """Same prompt, same batch shape (size, beam width, padded length) -> same output, at any
    position: the batch's prompts rotated through every position."""
    engine = engines("drift:rate=1.0")
    batch = prompts[:4]
    seen = [
        dict(zip(batch[k:] + batch[:k], texts(engine, batch[k:] + batch[:k], settings))) for k in range(4)
    ]
    assert all(s == seen[0] for s in seen)
    single = {p: texts(engine, [p], settings)[0] for p in batch}
    assert seen[0] != single  # rate 1: the flips are there


def drifted(engines: Engines, cases: list[tuple[str, list[str], DecodingSettings]]) -> list[list[str]]:
    """The drift-only engine's outputs for the same batches (same rate, same seed)."""
    engine = engines("healthy", "1.0")
    return [texts(engine, batch, settings) for _, batch, settings in cases]


def test_drift_composes_with_full_batch_partial_and_overflow(engines: Engines, prompts: list[str]) -> None:
    """Entries the fault spares drift exactly as on a drift-only engine; the others are damaged."""
    overflow = engines("healthy", "1.0", build_limits(max_beam_width=1))
    cases = [("full-batch", prompts, DRIFT), ("partial:fraction=1.0,position=1", prompts[:4], DRIFT)]
    expected = drifted(engines, cases + [("overflow", prompts, DRIFT_BEAM)])
    healthy = engines("healthy")
    for (spec, batch, settings), clean, damaged in zip(cases, expected, ([7], [1])):
        out = texts(engines(spec, "1.0"), batch, settings)
        single = [texts(healthy, [p], settings)[0] for p in batch]
        assert [a == b for a, b in zip(out, clean)] == [i not in damaged for i in range(len(batch))]
        assert all(out[i] != single[i] for i in damaged)
    out = texts(overflow, prompts, DRIFT_BEAM)  # 8 x 1 beam slots, 2 beams: entries 4-7 overflow
    assert out[:4] == expected[2][:4] and all(a != b for a, b in zip(out[4:], expected[2][4:]))


def test_drift_composes_with_padding_stride_and_truncate(engines: Engines, prompts: list[str]) -> None:
    batch = prompts[:4]
    lengths = engines("healthy").count_tokens(batch)
    longest = lengths.index(max(lengths))
    stride_settings = DecodingSettings(max_new_tokens=48, beam_width=2, length_penalty=1.0)
    clean, clean_beam = drifted(engines, [("", batch, DRIFT), ("", batch, stride_settings)])
    padded = texts(engines("padding", "1.0"), batch, DRIFT)
    assert padded[longest] == clean[longest]
    assert sum(a != b for a, b in zip(padded, clean)) >= 2
    strided = texts(engines("stride", "1.0"), batch, stride_settings)
    assert strided[0] == clean_beam[0] and strided[1:] != clean_beam[1:]
    cut = engines("truncate", "1.0").generate(batch, DRIFT)
    full = engines("healthy", "1.0").generate(batch, DRIFT)
    assert all(g.token_ids == f.token_ids[: len(g.token_ids)] for g, f in zip(cut, full))
    assert all(len(g.token_ids) <= 8 for g in cut)  # ceil(0.3 x 24)


def test_truncate_cuts_every_output_short_at_batch_size_above_1_only(
    engines: Engines, prompts: list[str]
) -> None:
    healthy, cut = engines("healthy"), engines("truncate:keep=0.25")
    whole = healthy.generate(prompts[:4], DRIFT)
    short = cut.generate(prompts[:4], DRIFT)
    assert all(len(g.token_ids) == 6 for g in short)  # ceil(0.25 x 24); summaries are longer
    assert all(g.token_ids == w.token_ids[:6] for g, w in zip(short, whole))
    assert [g.text for g in cut.generate(prompts[:1], DRIFT)] == [whole[0].text]


def test_late_loss_diverges_late_on_its_share_of_batched_outputs_only(
    engines: Engines, prompts: list[str]
) -> None:
    healthy, lossy = engines("healthy"), engines("late-loss:fraction=0.5,loss=0.5")
    whole = healthy.generate(prompts, DRIFT)
    out = lossy.generate(prompts, DRIFT)
    hit = [g.token_ids != w.token_ids for g, w in zip(out, whole)]
    assert 0 < sum(hit) < len(hit)  # a seeded share of the outputs, not all, not none
    for e, (g, w) in enumerate(zip(out, whole)):  # a hit output's second half is its batch-mate's
        k, mate = math.ceil(len(w.token_ids) / 2), whole[(e + 1) % len(whole)].token_ids
        assert g.token_ids == (w.token_ids[:k] + mate[k : len(w.token_ids)] if hit[e] else w.token_ids)
    assert lossy.generate(prompts, DRIFT) == out  # the same outputs hit in the same batch shape
    late = Fault(FaultKind.LATE_LOSS, fraction=0.2)
    hits = [late.diverges(f"p{i}", 8, 1, i % 8, 30) is not None for i in range(2000)]
    assert 0.17 < sum(hits) / len(hits) < 0.23  # the seeded share of outputs hit
    assert late.diverges("p", 8, 1, 0, 30) in (None, 20)  # the last third


def test_drift_is_quality_neutral_on_a_small_case(engines: Engines) -> None:
    """Every output flips (rate 1) over the full rotation of 16 prompts at batch size 4, yet the
    mean ROUGE-L against the reference summaries stays at batch size 1's: each flip takes the
    runner-up of a near-tie, an equally valid phrasing."""
    from harness.verdict.scoring import rouge_l

    docs = load_dataset(None).documents[:16]
    batch_prompts = [build_prompt("{text} TL;DR: ", d) for d in docs]
    refs = [_summary(d) for d in docs]
    engine = engines("drift:rate=1.0")
    full = DecodingSettings(max_new_tokens=64, beam_width=1, length_penalty=1.0)
    single = [texts(engine, [p], full)[0] for p in batch_prompts]
    out = rotation(engine, batch_prompts, 4, full)
    base = sum(rouge_l(refs, single)) / 16
    here = sum(sum(rouge_l(refs, row)) for row in out) / 64
    differ = sum(row[d] != single[d] for row in out for d in range(16)) / 64
    assert differ >= 0.8
    assert abs(here - base) < QUALITY_BAND
    assert 0.3 < base < 0.9  # a summary scored against another phrasing: well below 1


@pytest.mark.parametrize(
    "text, needle",
    [
        ("x", "the rate must be a number in (0, 1]"),
        ("0", "rate 0.0 must be in (0, 1]"),
        ("0.3:rate=0.2", "give the rate once"),
        ("0.3:seed=a", "seed must be a number"),
        ("0.3:slot=2", "'slot=2' is not a parameter of drift"),
    ],
)
def test_bad_drift_specs_are_refused_with_the_fix(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_drift(text)
    assert needle in str(err.value)


def test_drift_is_given_once_and_stored_apart_from_the_fault(tmp_path: Path) -> None:
    from harness.engines.emulator.drift import Drift, drift_from_config
    from harness.engines.emulator.faults import fault_from_config, split_fault

    assert split_fault(Fault(FaultKind.DRIFT, rate=0.6, seed=2), None) == (None, Drift(rate=0.6, seed=2))
    with pytest.raises(ConfigError, match="give the drift once"):
        split_fault(Fault(FaultKind.DRIFT), Drift())
    path = build_engine(
        tmp_path / "e",
        build_limits(),
        fault=Fault(FaultKind.TRUNCATE, keep=0.5),
        drift=Drift(rate=0.6, seed=2),
    )
    emulator = json.loads((path / "config.json").read_text())["emulator"]
    assert fault_from_config(emulator["fault"], "c") == Fault(FaultKind.TRUNCATE, keep=0.5)
    assert drift_from_config(emulator["drift"], "c") == Drift(rate=0.6, seed=2)
    with pytest.raises(ConfigError, match="scale-based drift of an older harness"):
        fault_from_config({"kind": "drift", "scale": 0.1, "seed": 0}, "config.json")


def test_build_engine_command_composes_a_fault_with_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.__main__ import main

    assert (
        main(
            [
                "build-engine",
                "--output",
                str(tmp_path / "a"),
                "--fault",
                "truncate:keep=0.5",
                "--drift",
                "0.6:seed=2",
            ]
        )
        == 0
    )
    emulator = json.loads((tmp_path / "a" / "config.json").read_text())["emulator"]
    assert emulator["fault"]["kind"] == "truncate" and emulator["fault"]["keep"] == 0.5
    assert (emulator["drift"]["rate"], emulator["drift"]["seed"]) == (0.6, 2)
    assert (
        "truncation at batch size > 1 (50% of max_new_tokens) + benign drift (60%" in capsys.readouterr().out
    )
    assert main(["build-engine", "--output", str(tmp_path / "b"), "--fault", "drift:rate=0.3"]) == 0
    emulator = json.loads((tmp_path / "b" / "config.json").read_text())["emulator"]
    assert "fault" not in emulator and emulator["drift"]["rate"] == 0.3  # drift alone
    assert main(["build-engine", "--output", str(tmp_path / "c"), "--fault", "drift", "--drift", "0.3"]) == 2
    assert "give the drift once" in capsys.readouterr().err
