"""The serve command's one engine thread: requests with the same decoding settings that arrive
within the batch window become one ``engine.generate`` call, in arrival order, so that a
request's arrival slot is its batch position. Prompts the engine's tokenizer cannot read, or
that do not fit its input limits, are answered 400 on their own and never join a batch.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

from harness.config import DecodingSettings
from harness.engines.base import EngineBase, Generates, Generation, as_engine
from harness.errors import describe
from harness.tools.serve.request import Bounds


@dataclass
class Pending:
    """One prompt waiting for the engine thread."""

    arrival: tuple[int, int]  # (connection accept order, index within the request's prompt list)
    prompt: str
    settings: DecodingSettings
    done: threading.Event = field(default_factory=threading.Event)
    result: Generation | None = None
    error: str | None = None
    status: int = 500
    batch: dict[str, int] | None = None  # {"id", "size", "position", "beam_width"} once generated


class Batcher:
    """The one engine thread: same-settings requests within the window -> one generate call."""

    def __init__(
        self,
        engine: EngineBase | Generates,
        *,
        max_batch_size: int,
        window_s: float,
        bounds: Bounds | None = None,
    ) -> None:
        self.engine: EngineBase = as_engine(engine)
        self.max_batch_size = max_batch_size
        self.window_s = window_s
        self.bounds = bounds or Bounds(max_prompts=max_batch_size)
        self.batches = 0
        self._queue: queue.Queue[Pending | None] = queue.Queue()
        self._held: list[Pending] = []  # arrived with other settings: first in the next batch
        self._stopping = False
        self._counted = False  # the engine has counted a prompt's tokens: it can count
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, items: list[Pending]) -> None:
        if self._stopping:
            for item in items:
                item.error, item.status = "the server is shutting down", 503
                item.done.set()
            return
        for item in items:
            self._queue.put(item)

    def stop(self) -> None:
        """Finish the batch in hand, fail what waits (503), end the thread."""
        self._stopping = True
        self._queue.put(None)
        self._thread.join()
        leftovers = list(self._held)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                leftovers.append(item)
        for item in leftovers:
            item.error, item.status = "the server is shutting down", 503
            item.done.set()

    def _take(self, timeout: float | None) -> Pending | None:
        """The next queued item (None: nothing within timeout, or stop asked)."""
        try:
            item = (
                self._queue.get(timeout=timeout)
                if timeout is None or timeout > 0
                else self._queue.get_nowait()
            )
        except queue.Empty:
            return None
        if item is None:
            self._stopping = True
        return item

    def next_batch(self) -> list[Pending] | None:
        """Gather one batch; None once stop is asked (stop() answers what still waits)."""
        if self._stopping:
            return None
        taken = self._held.pop(0) if self._held else self._take(None)
        if taken is None:
            return None
        first = taken
        batch: list[Pending] = [first]
        later: list[Pending] = []
        for item in self._held:
            (batch if item.settings == first.settings and len(batch) < self.max_batch_size else later).append(
                item
            )
        self._held = later
        deadline = time.monotonic() + self.window_s
        while len(batch) < self.max_batch_size and not self._stopping:
            arrived = self._take(deadline - time.monotonic())
            if arrived is None:
                break
            if arrived.settings == first.settings:
                batch.append(arrived)
            else:
                self._held.append(arrived)
        self._held.sort(key=lambda p: p.arrival)
        return sorted(batch, key=lambda p: p.arrival)

    def _run(self) -> None:
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            self.run_batch(batch)

    def _counts(self, batch: list[Pending]) -> list[int | Exception] | None:
        """Each item's prompt length in tokens, counted in the engine thread with the engine's
        own tokenizer: the whole batch at once, else, when that raises, each prompt on its own,
        so that a prompt the tokenizer cannot read is found out as its own request's fault
        (an Exception in its place). None: the engine cannot count (it returns None, a wrong
        number of counts, or raises for every prompt and never counted one)."""
        prompts = [p.prompt for p in batch]
        try:
            counted = self.engine.count_tokens(prompts)
        except Exception:
            counted = None
            alone: list[int | Exception] = []
            for prompt in prompts:
                try:
                    one = self.engine.count_tokens([prompt])
                except Exception as exc:
                    alone.append(exc)
                    continue
                if one is None or len(one) != 1:
                    return None
                alone.append(one[0])
            if any(not isinstance(n, Exception) for n in alone):
                self._counted = True
            return alone if self._counted else None
        if counted is None or len(counted) != len(batch):
            return None
        self._counted = True
        return list(counted)

    def _admit(self, batch: list[Pending]) -> list[Pending]:
        """The items whose prompts the engine can read and that fit its input limits; the
        others are answered 400 now, each for its own prompt, and never join the batch."""
        counts = self._counts(batch)
        if counts is None:  # the engine cannot count: it refuses what it cannot take itself
            return batch
        kept = []
        for item, tokens in zip(batch, counts):
            if isinstance(tokens, Exception):
                reason: str | None = f"the engine's tokenizer cannot read the prompt ({describe(tokens)})"
            else:
                reason = self.bounds.input_problem(tokens, item.settings.max_new_tokens)
            if reason is None:
                kept.append(item)
            else:
                item.error, item.status = reason, 400
                item.done.set()
        return kept

    def run_batch(self, batch: list[Pending]) -> None:
        batch = self._admit(batch)
        if not batch:
            return
        batch_id = self.batches
        self.batches += 1
        try:
            outputs = self.engine.generate([p.prompt for p in batch], batch[0].settings)
            if len(outputs) != len(batch):
                raise RuntimeError(f"the engine returned {len(outputs)} outputs for a batch of {len(batch)}")
            for position, (item, out) in enumerate(zip(batch, outputs)):
                item.result = out
                item.batch = {
                    "id": batch_id,
                    "size": len(batch),
                    "position": position,
                    "beam_width": item.settings.beam_width,
                }
        except Exception as exc:  # the engine's fault: every request of the batch gets a 500
            for item in batch:
                item.error, item.status = describe(exc), 500
        finally:
            for item in batch:
                item.done.set()
