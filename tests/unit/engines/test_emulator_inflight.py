"""The emulator's in-flight scheduler (inflight.py): healthy, every output is batch size 1's
token for token under any arrival pattern; each in-flight fault damages exactly its class of
requests and never bulk ``generate``.

Where a test needs requests admitted together it submits them while holding the engine's
``busy`` lock, which the scheduler takes for each step: they are all queued before the next
admission, so the schedule is the same on every run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from harness.config import DecodingSettings
from harness.engines.base import Generation, InFlight, NoInFlight
from harness.engines.emulator import inflight
from harness.engines.emulator.build import build_engine, build_limits
from harness.engines.emulator.engine import EmulatorEngine
from harness.engines.emulator.faults import parse_drift, parse_fault
from harness.engines.emulator.model import SlotKVCache
from harness.errors import EngineError
from harness.inputs.data import build_prompt, load_dataset

GREEDY = DecodingSettings(max_new_tokens=32, beam_width=1, length_penalty=1.0)
CHUNK = 192  # the default emulator.prefill_chunk the engines here are built with

Engines = Callable[[str], EmulatorEngine]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Engines:
    """spec ("healthy", a fault, or "drift:RATE") -> an engine of 8 slots, built once."""
    root = tmp_path_factory.mktemp("inflight")
    made: dict[str, EmulatorEngine] = {}

    def get(spec: str) -> EmulatorEngine:
        if spec not in made:
            fault = drift = None
            if spec.startswith("drift:"):
                drift = parse_drift(spec.removeprefix("drift:"))
            elif spec != "healthy":
                fault = parse_fault(spec, max_batch_size=8)
            limits = build_limits(max_beam_width=1)
            made[spec] = EmulatorEngine(build_engine(root / spec, limits, fault=fault, drift=drift))
        return made[spec]

    return get


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [build_prompt("{text} TL;DR: ", d) for d in load_dataset(None).documents[:20]]


@pytest.fixture(scope="module")
def alone(engines: Engines, prompts: list[str]) -> dict[str, Generation]:
    """Each prompt's batch-size-1 output on the healthy engine."""
    healthy = engines("healthy")
    return {p: healthy.generate([p], GREEDY)[0] for p in prompts}


def opened(engine: EmulatorEngine, settings: DecodingSettings = GREEDY) -> InFlight:
    session = engine.in_flight(settings)
    assert isinstance(session, InFlight)
    return session


@contextmanager
def together(engine: EmulatorEngine) -> Iterator[None]:
    """Requests submitted inside are admitted in one scheduler step."""
    with engine.busy:
        yield


def run(session: InFlight, prompts: Sequence[str]) -> list[Generation]:
    out = []
    for pending in [session.submit(p) for p in prompts]:
        result = pending.result()
        assert isinstance(result, Generation)
        out.append(result)
    return out


def same(out: Sequence[Generation], alone: dict[str, Generation], prompts: Sequence[str]) -> list[bool]:
    return [g.token_ids == alone[p].token_ids and g.text == alone[p].text for g, p in zip(out, prompts)]


def lengths(engine: EmulatorEngine, prompts: Sequence[str]) -> list[int]:
    return engine.count_tokens(prompts)


def test_all_at_once_equals_batch_size_one(
    engines: Engines, prompts: list[str], alone: dict[str, Generation]
) -> None:
    engine = engines("healthy")
    session = opened(engine)
    try:
        with together(engine):
            pending = [session.submit(p) for p in prompts[:8]]
        out = [p.result() for p in pending]
        assert all(isinstance(g, Generation) for g in out)
        got = [g for g in out if isinstance(g, Generation)]
        assert same(got, alone, prompts[:8]) == [True] * 8
        assert [g.slot for g in got] == list(range(8))  # lowest free slot first
        assert [g.cached_tokens for g in got] == [0] * 8
        # the same prompts again: served from the session's prefix cache, still exact
        warm = run(session, prompts[:8])
        assert same(warm, alone, prompts[:8]) == [True] * 8
        assert [g.cached_tokens for g in warm] == lengths(engine, prompts[:8])
        assert "prefix cache" in session.cache
    finally:
        session.close()


def test_staggered_arrivals_with_refill_equal_batch_size_one(
    engines: Engines, prompts: list[str], alone: dict[str, Generation]
) -> None:
    """More prompts than slots, sent a few milliseconds apart from another thread's point of
    view: slots are refilled as requests end and long prompts are prefilled in chunks while
    others decode; every output is still batch size 1's."""
    session = opened(engines("healthy"))
    try:
        pending = []
        for i, prompt in enumerate(prompts[:20]):
            pending.append(session.submit(prompt))
            time.sleep(0.002 * (i % 4))
        out = [p.result() for p in pending]
    finally:
        session.close()
    got = [g for g in out if isinstance(g, Generation)]
    assert same(got, alone, prompts[:20]) == [True] * 20
    assert all(g.slot is not None and 0 <= g.slot < 8 for g in got)


def test_beam_search_has_no_in_flight_path(engines: Engines) -> None:
    answer = engines("healthy").in_flight(DecodingSettings(max_new_tokens=8, beam_width=2))
    assert isinstance(answer, NoInFlight)
    assert "greedy only" in answer.reason


def test_an_over_long_prompt_is_refused_from_its_result(engines: Engines, prompts: list[str]) -> None:
    engine = engines("healthy")
    session = opened(engine)
    try:
        long = " ".join(prompts[:4])
        assert lengths(engine, [long])[0] > engine.max_input_len
        refused = session.submit(long)
        with pytest.raises(RuntimeError, match="max_input_len"):
            refused.result()
        fine = session.submit(prompts[0]).result()  # the session goes on
        assert isinstance(fine, Generation) and fine.text
    finally:
        session.close()


def test_close_stops_the_scheduler(engines: Engines, prompts: list[str]) -> None:
    session = opened(engines("healthy"))
    assert session.submit(prompts[0]).result()
    session.close()
    assert not getattr(session, "running")  # noqa: B009 (EmulatorInFlight's, not InFlight's)
    with pytest.raises(RuntimeError, match="closed"):
        session.submit(prompts[0])


@pytest.mark.parametrize("spec", ["stale-slot", "prefill-corrupt", "warm-cache", "inflight-graph"])
def test_in_flight_faults_leave_bulk_generate_alone(engines: Engines, prompts: list[str], spec: str) -> None:
    healthy, faulty = engines("healthy"), engines(spec)
    assert faulty.generate(prompts[:8], GREEDY) == healthy.generate(prompts[:8], GREEDY)
    kind = json.loads((faulty.path / "config.json").read_text())["emulator"]["fault"]["kind"]
    assert kind == spec


def test_stale_slot_damages_the_requests_that_refill_a_slot(
    engines: Engines, prompts: list[str], alone: dict[str, Generation]
) -> None:
    engine = engines("stale-slot")
    session = opened(engine)
    try:
        with together(engine):
            pending = [session.submit(p) for p in prompts[:16]]
        got = [g for g in (p.result() for p in pending) if isinstance(g, Generation)]
    finally:
        session.close()
    hits = same(got, alone, prompts[:16])
    assert hits[:8] == [True] * 8  # the first wave had fresh slots
    assert sum(hits[8:]) <= 1  # a refilled slot reads its last occupant's keys


def test_prefill_corrupt_damages_what_decodes_while_a_long_prompt_is_admitted(
    engines: Engines, prompts: list[str], alone: dict[str, Generation]
) -> None:
    engine = engines("prefill-corrupt")
    sizes = dict(zip(prompts, lengths(engine, prompts)))
    short = [p for p in prompts if sizes[p] <= CHUNK][:3]
    long = next(p for p in prompts if sizes[p] > CHUNK)
    session = opened(engine)
    try:  # alone, even a long prompt is fine: nothing else decodes while it is admitted
        assert same(run(session, [long]), alone, [long]) == [True]
        assert same(run(session, short), alone, short) == [True] * 3  # one chunk each
    finally:
        session.close()
    fresh = opened(engine)  # the long prompt not in its prefix cache: two steps to admit
    try:
        with together(engine):  # the short ones decode while the long one is admitted
            pending = [fresh.submit(p) for p in [*short, long]]
        got = [g for g in (p.result() for p in pending) if isinstance(g, Generation)]
    finally:
        fresh.close()
    assert same(got, alone, [*short, long]) == [False, False, False, True]


def test_warm_cache_damages_the_second_pass_only(
    engines: Engines, prompts: list[str], alone: dict[str, Generation]
) -> None:
    engine = engines("warm-cache")
    session = opened(engine)
    try:
        cold, warm = run(session, prompts[:8]), run(session, prompts[:8])
    finally:
        session.close()
    assert same(cold, alone, prompts[:8]) == [True] * 8
    assert sum(same(warm, alone, prompts[:8])) <= 1
    assert [g.cached_tokens for g in warm] == lengths(engine, prompts[:8])


def test_inflight_graph_damage_follows_how_many_are_in_flight(
    engines: Engines, prompts: list[str], alone: dict[str, Generation]
) -> None:
    engine = engines("inflight-graph")
    session = opened(engine)
    try:
        assert same(run(session, prompts[:1]), alone, prompts[:1]) == [True]
        with together(engine):  # two in flight, then one: captured sizes
            pair = [session.submit(p) for p in prompts[1:3]]
        assert same(
            [g for g in (p.result() for p in pair) if isinstance(g, Generation)], alone, prompts[1:3]
        ) == [
            True,
            True,
        ]
        with together(engine):  # five: the fifth reads the first's KV
            five = [session.submit(p) for p in prompts[3:8]]
        got = [g for g in (p.result() for p in five) if isinstance(g, Generation)]
    finally:
        session.close()
    assert not same(got, alone, prompts[3:8])[4]


def test_drift_flips_only_requests_that_shared_a_step(
    engines: Engines, prompts: list[str], alone: dict[str, Generation]
) -> None:
    engine = engines("drift:1.0")
    session = opened(engine)
    try:
        one_by_one = [run(session, [p])[0] for p in prompts[:4]]
        with together(engine):
            pending = [session.submit(p) for p in prompts[:8]]
        shared = [g for g in (p.result() for p in pending) if isinstance(g, Generation)]
    finally:
        session.close()
    assert same(one_by_one, alone, prompts[:4]) == [True] * 4  # never shared a step
    assert sum(same(shared, alone, prompts[:8])) <= 4  # rate 1.0: most take a near-tie's runner-up


def test_prefill_chunk_is_a_build_setting(tmp_path: Path) -> None:
    path = build_engine(tmp_path / "chunk", build_limits(max_beam_width=1), prefill_chunk=32)
    assert EmulatorEngine(path).prefill_chunk == 32
    config = json.loads((path / "config.json").read_text())
    config["emulator"]["prefill_chunk"] = 0
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngineError, match="prefill_chunk"):
        EmulatorEngine(path)


def test_each_answer_says_when_its_prompt_was_in(engines: Engines, prompts: list[str]) -> None:
    """first_token: from its submission to its prompt's last chunk; a long prompt admitted
    beside seven others takes longer to get there than the first of them."""
    engine = engines("healthy")
    session = opened(engine)
    try:
        with together(engine):
            pending = [session.submit(p) for p in prompts[:8]]
        t0 = time.perf_counter()
        got = [p.result() for p in pending]
        waited = time.perf_counter() - t0
    finally:
        session.close()
    firsts = [g.first_token for g in got if isinstance(g, Generation)]
    assert len(firsts) == 8 and all(f is not None and 0 < f for f in firsts)
    assert max(f for f in firsts if f is not None) < waited + 5  # within the pass, not a clock of its own


def fixed_schedule(engine: EmulatorEngine, prompts: Sequence[str]) -> list[tuple[object, ...]]:
    """Every answer of a schedule that is the same on every run: all the prompts queued before
    the first step (eight admitted together, each later one into the first slot freed; the
    long ones prefilled in two chunks while the others decode), then all again, served from the
    prefix cache."""
    session = opened(engine)
    try:
        out: list[tuple[object, ...]] = []
        for _ in range(2):
            with together(engine):
                pending = [session.submit(p) for p in prompts]
            for answer in [p.result() for p in pending]:
                assert isinstance(answer, Generation)
                out.append((answer.token_ids, answer.text, answer.slot, answer.cached_tokens))
        return out
    finally:
        session.close()


@pytest.mark.parametrize(
    "spec", ["healthy", "stale-slot", "prefill-corrupt", "warm-cache", "inflight-graph", "drift:1.0"]
)
def test_decoding_on_one_thread_gives_the_tokens_of_two(
    engines: Engines, prompts: list[str], spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler decodes on one intra-op thread (``DECODE_THREADS``); with two (torch's
    default on the 2-core machines, the path before) every answer is the same, token for token,
    healthy and under each in-flight fault and drift."""
    engine = engines(spec)
    seen: list[int] = []
    decode = engine.model.decode

    def counted(tokens: torch.Tensor, positions: torch.Tensor, cache: SlotKVCache) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return decode(tokens, positions, cache)

    monkeypatch.setattr(engine.model, "decode", counted)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # read by the scheduler's thread when it starts
    try:
        monkeypatch.setattr(inflight, "DECODE_THREADS", None)
        two = fixed_schedule(engine, prompts[:12])
        assert set(seen) == {2}
        seen.clear()
        monkeypatch.setattr(inflight, "DECODE_THREADS", 1)
        one = fixed_schedule(engine, prompts[:12])
        assert set(seen) == {1}
    finally:
        torch.set_num_threads(before)
    assert one == two


@pytest.mark.parametrize("slots", [5, 6, 7])
def test_an_engine_of_any_slot_count_answers_the_tokens_of_batch_size_one(
    tmp_path: Path, prompts: list[str], alone: dict[str, Generation], slots: int
) -> None:
    """On one decode thread a step of 5 to 7 rows multiplies differently from one of 8 or 1, in
    the last place; the tokens stay batch size 1's, every prompt queued at once (each later one
    into a slot freed mid-run)."""
    engine = EmulatorEngine(
        build_engine(tmp_path / "e", build_limits(max_batch_size=slots, max_beam_width=1))
    )
    session = opened(engine)
    try:
        out = run(session, prompts)
    finally:
        session.close()
    assert same(out, alone, prompts) == [True] * len(prompts)
