"""The arrival loop of the scheduled cells (harness.stages.arrivals) against an in-flight double
whose requests take a fixed time: each schedule's shape, the timings it records, and failures."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from harness.engines.base import Generation, InFlight, Pending
from harness.stages.arrivals import RequestsFailed, drive


class Timed(InFlight):
    """Answers each prompt upper-cased after ``seconds`` (``cycle`` times: the k-th request
    submitted after ``seconds * cycle[k % len(cycle)]``); ``slots`` workers; counts how many ran at
    once; a prompt "boom" raises, a prompt "hang" never answers."""

    def __init__(self, seconds: float, slots: int = 64, cycle: tuple[float, ...] = (1.0,)) -> None:
        self.seconds, self.slots, self.cycle = seconds, slots, cycle
        self.submitted = 0
        self.durations: dict[str, float] = {}  # each prompt's time, set when it is submitted
        self.pool = ThreadPoolExecutor(slots)
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.closed = threading.Event()

    def _run(self, prompt: str) -> Generation:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if prompt == "boom":
                raise ValueError("the engine's own error")
            if prompt == "hang":
                self.closed.wait()
            time.sleep(self.durations.get(prompt, self.seconds))
            return Generation(text=prompt.upper(), slot=0)
        finally:
            with self.lock:
                self.running -= 1

    def submit(self, prompt: str) -> Pending:
        if prompt == "refused":
            raise ValueError("beam width 4 is more than the engine's max_beam_width 1")
        self.durations[prompt] = self.seconds * self.cycle[self.submitted % len(self.cycle)]
        self.submitted += 1
        future: Future[Generation] = self.pool.submit(self._run, prompt)
        return future

    def close(self) -> None:
        self.closed.set()
        self.pool.shutdown(wait=True, cancel_futures=True)


def test_refill_sends_a_first_wave_of_c_then_one_as_each_answer_comes_back() -> None:
    # uneven output lengths, as refill's requests have: answers come back 40 ms apart, not all
    # at once (four that came back together would leave the next one nothing to join)
    engine = Timed(0.04, cycle=(1.0, 2.0, 3.0, 4.0))
    sent = drive(engine, [f"p{i}" for i in range(12)], first_wave=4, cap=4)
    assert [s.in_flight for s in sent[:4]] == [0, 1, 2, 3]  # the first wave, all at once
    # each later one into a place just freed, beside the others still decoding (two answers
    # that come back together free two places)
    assert all(1 <= s.in_flight <= 3 for s in sent[4:])
    assert engine.most == 4 and [s.generation.text for s in sent if s.generation] == [
        f"P{i}" for i in range(12)
    ]
    answered = sorted(s.answered or 0.0 for s in sent[:4])
    assert all(s.sent >= answered[0] for s in sent[4:])  # no fifth request before an answer


def test_staggered_arrivals_are_paced_by_the_first_requests_own_time() -> None:
    engine = Timed(0.08)
    sent = drive(engine, [f"p{i}" for i in range(10)], first_wave=1, cap=4, gap=None)
    first = sent[0]
    assert first.answered is not None and sent[1].sent >= first.answered  # the first went alone
    gaps = [b.sent - a.sent for a, b in zip(sent[1:], sent[2:])]
    assert min(gaps) >= 0.08 / 4 * 0.9  # its time over the concurrency apart, never closer
    assert sum(s.in_flight > 0 for s in sent[2:]) >= 6 and engine.most <= 4  # each joined others


def test_a_request_that_raises_fails_the_drive_naming_it() -> None:
    with pytest.raises(RequestsFailed, match=r"request 3 of 4 raised: the engine's own error"):
        drive(Timed(0.01), ["a", "b", "boom", "c"], first_wave=4, cap=4)


def test_a_request_the_engine_refuses_at_submit_fails_the_drive_naming_it() -> None:
    with pytest.raises(RequestsFailed, match=r"request 2 of 3 raised: beam width 4 is more than"):
        drive(Timed(0.01), ["a", "refused", "c"], first_wave=3, cap=3)


def test_a_request_that_never_answers_fails_once_the_timeout_passes() -> None:
    t, engine = time.perf_counter(), Timed(0.01)
    with pytest.raises(RequestsFailed, match=r"request 2 did not come back within --batch-timeout 0.3 s"):
        drive(engine, ["a", "hang"], first_wave=2, cap=2, timeout=0.3)
    assert time.perf_counter() - t < 5
    engine.close()


def test_a_slow_first_request_does_not_set_the_pace_for_good() -> None:
    """An engine whose first request warms it up (a manager starting, kernels compiled) answers
    it slowly; the pace follows the requests answered since, so the later ones still overlap."""

    class WarmingUp(Timed):
        def _run(self, prompt: str) -> Generation:
            if prompt == "p0":
                time.sleep(0.6)
            return super()._run(prompt)

    sent = drive(WarmingUp(0.05), [f"p{i}" for i in range(12)], first_wave=1, cap=4, gap=None)
    assert sum(s.in_flight > 0 for s in sent[1:]) >= 6


class Answer:
    """An answer that is not a ``concurrent.futures.Future``: only ``result()``."""

    def __init__(self, future: Future[Generation]) -> None:
        self.future = future

    def result(self) -> object:
        return self.future.result()


class Plain(Timed):
    """``Timed`` whose answers are plain objects with ``result()``, not futures."""

    def submit(self, prompt: str) -> Pending:
        future = super().submit(prompt)
        assert isinstance(future, Future)
        return Answer(future)


@pytest.mark.parametrize("engine", [Timed(0.03, slots=4), Plain(0.03, slots=4)], ids=["future", "plain"])
def test_answers_are_taken_when_they_come_back(engine: Timed) -> None:
    """A future's answer is taken by a callback as it is set, without a thread per request
    (the emulator answers 256 requests a run); any other answer by a thread of its own. Either
    way each request's answer time is when it came back."""
    threads: list[int] = []  # threads started since the drive began and alive
    # by identity, not a count: an earlier test's idle pool may end meanwhile
    run, before = engine._run, set(threading.enumerate())

    def counted(prompt: str) -> Generation:
        threads.append(len(set(threading.enumerate()) - before))
        return run(prompt)

    engine._run = counted  # type: ignore[method-assign]
    t0 = time.perf_counter()
    sent = drive(engine, [f"p{i}" for i in range(12)], first_wave=4, cap=4)
    took = time.perf_counter() - t0
    engine.close()
    assert [s.generation.text for s in sent if s.generation] == [f"P{i}" for i in range(12)]
    assert all(s.answered is not None and 0.03 <= s.answered - s.sent < took for s in sent)
    if isinstance(engine, Plain):
        assert max(threads) > 4  # the pool's four and one per request in flight
    else:
        assert max(threads) <= 4  # the pool's alone
