"""The hf backend's in-flight path: transformers' continuous batching over the bundled model.

Requests sent one by one, several decoding at once, give in float32 the very outputs of
``HFEngine.generate`` one prompt at a time; a beam width has no in-flight path (the manager
would answer greedy); ``close()`` leaves no thread behind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from harness.config import DecodingSettings
from harness.config.basics import DEFAULT_PROMPT_TEMPLATE
from harness.engines.base import BatchError, Generation, InFlight, NoInFlight, Pending
from harness.engines.hf import HFEngine
from harness.inputs.data import build_prompt, load_dataset

GREEDY = DecodingSettings(beam_width=1, max_new_tokens=24)


@pytest.fixture(scope="module")
def engine() -> Iterator[HFEngine]:
    from harness.engines.emulator.build import BUNDLED_MODEL

    engine = HFEngine(BUNDLED_MODEL, device="cpu")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [build_prompt(DEFAULT_PROMPT_TEMPLATE, d) for d in load_dataset(None).documents[:6]]


def opened(engine: HFEngine, settings: DecodingSettings = GREEDY) -> InFlight:
    path = engine.in_flight(settings)
    assert isinstance(path, InFlight), path
    return path


def answer(pending: Pending) -> Generation:
    out = pending.result()
    assert isinstance(out, Generation), out
    return out


def most_at_once(outputs: list[Generation]) -> int:
    """The most requests the manager had between joining the batch and finishing."""
    spans = []
    for out in outputs:
        assert out.timing is not None
        spans += [(out.timing.written, 1), (out.timing.finished, -1)]
    running = peak = 0
    for _, step in sorted(spans):
        running += step
        peak = max(peak, running)
    return peak


def test_staggered_requests_give_the_outputs_of_one_prompt_at_a_time(
    engine: HFEngine, prompts: list[str]
) -> None:
    solo = [engine.generate([p], GREEDY)[0] for p in prompts]
    path = opened(engine)
    try:
        pending = []
        for prompt in prompts:  # one every 20 ms: each joins a batch already decoding
            pending.append(path.submit(prompt))
            time.sleep(0.02)
        outputs = [answer(p) for p in reversed(pending)][::-1]  # read in any order
    finally:
        path.close()
    assert most_at_once(outputs) > 1
    assert [o.token_ids for o in outputs] == [s.token_ids for s in solo]
    assert [o.text for o in outputs] == [s.text for s in solo]
    assert all(o.slot is None and o.cached_tokens is None for o in outputs)  # the manager says neither
    assert path.slots is not None and path.slots > 1 and "prefix" in path.cache


def test_results_read_from_other_threads(engine: HFEngine, prompts: list[str]) -> None:
    path = opened(engine)
    texts: dict[int, str] = {}
    try:
        pending = [path.submit(p) for p in prompts[:3]]

        def read(i: int) -> None:
            texts[i] = answer(pending[i]).text

        readers = [threading.Thread(target=read, args=(i,)) for i in range(3)]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout=60)
    finally:
        path.close()
    assert sorted(texts) == [0, 1, 2] and all(texts.values())


def test_a_beam_width_has_no_in_flight_path(engine: HFEngine) -> None:
    path = engine.in_flight(DecodingSettings(beam_width=2, max_new_tokens=24))
    assert isinstance(path, NoInFlight)
    assert "greedy only" in path.reason and "num_beams=2" in path.reason


def test_close_leaves_no_thread_and_refuses_later_requests(engine: HFEngine, prompts: list[str]) -> None:
    before = set(threading.enumerate())
    path = opened(engine)
    assert set(threading.enumerate()) - before  # the manager's loop and the collector
    running = path.submit(prompts[0])
    path.close()
    path.close()  # idempotent
    assert set(threading.enumerate()) - before == set()
    try:  # answered before the stop, or failed by it: never left waiting
        answer(running)
    except BatchError as exc:
        assert "continuous batching" in str(exc)
    with pytest.raises(RuntimeError, match="closed"):
        path.submit(prompts[1])


def test_closing_the_engine_stops_a_path_left_open(prompts: list[str]) -> None:
    from harness.engines.emulator.build import BUNDLED_MODEL

    before = set(threading.enumerate())
    engine = HFEngine(BUNDLED_MODEL, device="cpu")
    path = opened(engine)
    path.submit(prompts[0])
    engine.close()  # the manager's loop is no daemon: left running, it would hold the process
    assert set(threading.enumerate()) - before == set()
