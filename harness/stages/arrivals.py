"""Sending requests into an engine's in-flight path on a schedule, and timing them.

One loop serves every schedule: requests go out in a given order, ``first_wave`` of them at
once, then each next one as soon as fewer than ``cap`` are in flight and ``gap`` seconds have
passed since the last was sent. ``staggered`` is a first wave of one and a gap of a request's
own time over the concurrency (paced by the engine's speed: the latest answered request's);
``refill`` a first wave of C and no gap, so each new request takes the place one just freed.
A request's answer time is when it came back, whatever the order: an answer that is a
``concurrent.futures.Future`` (the emulator's) is taken by a callback the moment it is set, any
other is awaited in a thread of its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from harness.engines.base import Generation, InFlight, Pending, as_generation


@dataclass
class Sent:
    """One request: its prompt's index, arrival rank, when it went out and came back (seconds
    from the first request), how many others were in flight when it went out, and its answer or
    the error its ``result()`` raised."""

    index: int
    rank: int
    sent: float
    in_flight: int
    answered: float | None = None
    generation: Generation | None = None
    error: BaseException | None = None


class RequestsFailed(RuntimeError):
    """A request's ``result()`` raised, or it did not come back within the timeout."""


class _Flight:
    """The requests of one drive, and a condition the loop waits on."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.sent: list[Sent] = []
        self.open = 0
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def send(self, flight: InFlight, index: int, prompt: str) -> Sent:
        with self.lock:
            record = Sent(index=index, rank=len(self.sent), sent=self.now(), in_flight=self.open)
            self.sent.append(record)
            self.open += 1
        try:
            pending = flight.submit(prompt)
        except Exception as exc:  # a refusal at submit: said as the request's error
            self._settle(record, None, exc)
            return record
        if isinstance(pending, Future):  # no thread: settled by the thread that answers it
            pending.add_done_callback(lambda done: self._await(record, done))
        else:
            threading.Thread(target=self._await, args=(record, pending), daemon=True).start()
        return record

    def _await(self, record: Sent, pending: Pending) -> None:
        try:
            generation: Generation | None = as_generation(pending.result())
            error: BaseException | None = None
        except BaseException as exc:  # the engine's own exception types: said with the cell
            generation, error = None, exc
        self._settle(record, generation, error)

    def _settle(self, record: Sent, generation: Generation | None, error: BaseException | None) -> None:
        with self.lock:
            record.answered, record.generation, record.error = self.now(), generation, error
            self.open -= 1
            self.lock.notify_all()

    def pace(self, cap: int) -> float:
        """The latest answered request's own time over ``cap`` (0: none answered yet)."""
        with self.lock:
            done = [r for r in self.sent if r.answered is not None]
        if not done:
            return 0.0
        latest = max(done, key=lambda r: r.answered or 0.0)
        return ((latest.answered or latest.sent) - latest.sent) / cap

    def settle(self, timeout: float | None) -> None:
        """Wait until every request sent so far has come back."""
        while True:
            with self.lock:
                if self.open == 0:
                    return
            self.wait(None, timeout)

    def wait(self, until: float | None, timeout: float | None) -> None:
        """Wait for an answer (at most until ``until`` on this flight's clock); raise where the
        oldest open request has waited past ``timeout``."""
        with self.lock:
            left = None if until is None else max(0.0, until - self.now())
            self.lock.wait(0.5 if left is None else min(left, 0.5))
            if timeout is not None:
                late = [r for r in self.sent if r.answered is None and self.now() - r.sent > timeout]
                if late:
                    raise RequestsFailed(
                        f"request {late[0].rank + 1} did not come back within --batch-timeout {timeout:g} s"
                    )


def drive(
    flight: InFlight,
    prompts: Sequence[str],
    *,
    first_wave: int,
    cap: int,
    gap: float | None = 0.0,
    timeout: float | None = None,
) -> list[Sent]:
    """Send ``prompts`` in order on the schedule the arguments make (module docstring) and wait
    for every answer; ``gap`` None: paced by the engine, the first request alone and each next
    one the latest answered request's own time over ``cap`` after the last (a first request that
    warmed the engine up does not set the pace for good). A request that raised raises
    ``RequestsFailed`` naming it."""
    run = _Flight()
    last = 0.0
    for i, prompt in enumerate(prompts):
        if gap is None and i == 1:
            run.settle(timeout)  # the first request alone
        while i >= first_wave:
            with run.lock:
                room = run.open < cap
            due = last + (run.pace(cap) if gap is None else gap)
            if room and run.now() >= due:
                break
            run.wait(due if room else None, timeout)
        last = run.send(flight, i, prompt).sent
    run.settle(timeout)
    failed = next((r for r in run.sent if r.error is not None), None)
    if failed is not None:
        raise RequestsFailed(
            f"request {failed.rank + 1} of {len(prompts)} raised: {failed.error}"
        ) from failed.error
    return run.sent
