"""The emulator's in-flight path: requests sent one by one join a running batch of slots.

``EmulatorEngine.in_flight(settings)`` opens an ``EmulatorInFlight`` for greedy decoding (the
scheduler has no beam search: a beam width above 1 gets ``NoInFlight``). A background thread
runs the scheduler's steps, as an in-flight batching manager does:

- a step first admits queued requests into free slots, lowest slot first. A prompt of L tokens
  takes ceil(L / ``emulator.prefill_chunk``) steps to admit (chunked prefill) while the other
  slots go on decoding; with its last chunk in, its keys and values (the engine's
  ``PrefillCache``: the prompt phase bulk ``generate`` uses) are written into its slot and its
  first token is taken from the prompt phase's logits;
- then one decode step runs over every slot, each request at its own position (prompt length
  plus tokens so far); idle slots decode a harmless token at position 0, which the next
  admission overwrites. A request ends at the end token or ``max_new_tokens`` and frees its slot.

The decode step always runs over all ``slots`` rows, so one request's arithmetic never depends
on how many others are in flight: with no fault and no drift every output equals the prompt's
batch-size-1 ``generate`` output token for token, under any arrival pattern
(tests/unit/engines/test_emulator_inflight.py checks it).

The decode steps run on one intra-op thread (``DECODE_THREADS``), whatever torch's default. The
scheduler's thread is not the process's main thread, which keeps the OpenMP team of its earlier
torch work, and a parallel operation of a second team was several times slower on the idle
2-core machine (an add of 200,000 floats on two threads: 18 us in the main thread, 85 us in
another).
On two threads a step of the bundled engine took 5.4 to 5.9 ms, on one 2.8 to 3.1 ms (the same
minutes), and two threads lost more while another process held a core; in the main thread of
an otherwise idle process one thread and two take about as long (the products are small).
A step's logits are not bit for bit the batch-size-1 step's on any thread count (it attends
over the longest row's positions and multiplies 8 rows at once), so what the path keeps is the
tokens: with one decode thread every output of the 64 bundled prompts, all queued at once,
equals its batch-size-1 output for engines of 3, 5, 6, 7 and 8 slots, and the answers are the
same as with two threads (tests/unit/engines/test_emulator_inflight.py). Prompt phases keep the
default threads: they are shared with bulk ``generate`` (``PrefillCache``), whose outputs must
not depend on which path computed a prompt first.

Each answer says the slot it ran in, the prompt tokens served from cache and when, after its
submission, its prompt was in and its first token taken (``first_token``), as engines that
time their requests do (vLLM's first_token_time, TensorRT-LLM's request performance metrics).

A prompt admitted again within one session is served from the session's prefix cache: admitted
in one step, it reports all its prompt tokens cached. Benign drift (drift.py) applies as in
bulk: a request that has shared a decode step with another takes the runner-up of one near-tie
of its batch-size-1 output, placed by a hash of its prompt (the same at any arrival pattern).

The in-flight faults (faults.py, ``IN_FLIGHT_ONLY``) damage the model's state here, nowhere else:
stale-slot keeps a refilled slot's previous keys and values over the first half of the new
prompt; prefill-corrupt writes each chunk of a long prompt being admitted into the slots that
decode at that step too (a block table shared by mistake), at the chunk's positions;
warm-cache reads a prompt served from the prefix cache with every KV block (16 positions) but
its first and last zeroed, as if the blocks between had been evicted and reused; and
inflight-graph pads a step of A requests (A not a power of two) to the next power, the requests
past the previous power reading another request's KV, as the bulk graph-ladder fault does.
Bulk faults are not applied here: this path is healthy on them.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from harness.config import DecodingSettings
from harness.engines.base import Generation, InFlight, Pending
from harness.engines.emulator.drift import Drift, Trace
from harness.engines.emulator.faults import IN_FLIGHT_ONLY, Fault, FaultKind
from harness.engines.emulator.model import MistralEmulator, ModelShape, Prefill, PrefillCache, allocate_cache
from harness.engines.emulator.search import greedy_ties
from harness.engines.protocols import Tokenizer
from harness.model.cell import captured_below, is_captured


class Emulator(Protocol):
    """What the scheduler reads of the emulator engine (``EmulatorEngine``): its model, prompt
    phases and tokenizer, its build limits, fault and drift, the lock its bulk batches hold, and
    the batch-size-1 traces drift flips near-ties of."""

    model: MistralEmulator
    prefills: PrefillCache
    tokenizer: Tokenizer
    eos_id: int
    shape: ModelShape
    path: Path
    max_batch_size: int
    max_seq_len: int
    prefill_chunk: int
    fault: Fault | None
    drift: Drift | None
    busy: threading.RLock
    _traces: dict[tuple[str, DecodingSettings], Trace]

    def _record_traces(self, prompts: list[str], settings: DecodingSettings) -> None: ...

    def refusal(self, length: int, max_new_tokens: int) -> str | None: ...


DECODE_THREADS: int | None = 1  # intra-op threads of a decode step (None: torch's default)
STALE_SHARE = 0.5  # stale-slot: the share of a refilled slot's new prompt left as it was
WARM_BLOCK = 16  # warm-cache: positions per KV block; all but a prompt's first and last read zeros


@dataclass(eq=False)
class _Request:
    """One request from its submission to its answer."""

    prompt: str
    future: Future[Generation]
    ids: tuple[int, ...] = ()
    prefill: Prefill | None = None
    slot: int = -1
    chunks: int = 0  # prefill chunks still to admit
    total: int = 0  # prefill chunks in all
    cached: int = 0  # prompt tokens served from the session's prefix cache
    out: list[int] = field(default_factory=list)
    shared: bool = False  # has decoded in a step with another request (drift)
    flip: int | None = None  # drift: the step from which it takes a near-tie's runner-up
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float | None = None  # seconds from its submission until its prompt was in

    @property
    def position(self) -> int:
        """Where its last token goes in the next decode step."""
        return len(self.ids) + len(self.out) - 1


class EmulatorInFlight(InFlight):
    """One in-flight session of an emulator engine for greedy ``settings`` (see the module
    docstring); ``submit`` is safe from any thread, ``result()`` blocks until the answer."""

    cache = (
        "the in-flight session's prefix cache keeps each prompt it has admitted: the same prompt "
        "sent again is served from it, all its prompt tokens cached, and admitted in one step"
    )
    fresh_slots = True  # each session allocates its own KV cache and slots

    def __init__(self, engine: Emulator, settings: DecodingSettings) -> None:
        self.engine, self.settings = engine, settings
        self.slots: int = engine.max_batch_size
        fault = engine.fault
        self.fault = fault.kind if fault is not None and fault.kind in IN_FLIGHT_ONLY else None
        # its own KV cache: the bulk path's stays as generate left it
        self.kv = allocate_cache(
            engine.shape, self.slots, engine.max_seq_len, engine.model.dtype, engine.path / "config.json"
        )
        self._rows: list[_Request | None] = [None] * self.slots
        self._served: set[int] = set()  # slots an earlier request of this session ran in
        self._seen: set[tuple[int, ...]] = set()  # the session's prefix cache
        self._queue: deque[_Request] = deque()
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="emulator-in-flight", daemon=True)
        self._thread.start()

    def submit(self, prompt: str) -> Pending:
        request = _Request(prompt, Future())
        with self._wake:
            if self._closed:
                raise RuntimeError("the emulator's in-flight session is closed")
            self._queue.append(request)
            self._wake.notify()
        return request.future

    def close(self) -> None:
        """Stop the scheduler; requests not finished by then raise from ``result()``."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    @property
    def running(self) -> bool:
        """Whether the scheduler's thread is alive."""
        return self._thread.is_alive()

    # -- the scheduler's thread -----------------------------------------------------------

    def _run(self) -> None:
        error: BaseException = RuntimeError("the in-flight session was closed before this request finished")
        try:
            while self._wait():
                with self.engine.busy, torch.inference_mode():
                    self._step()
        except BaseException as exc:  # every waiting request hears of it, not only the log
            error = exc
        with self._wake:
            self._closed = True
            left = [*self._queue, *(r for r in self._rows if r is not None)]
            self._queue.clear()
        for request in left:
            if not request.future.done():
                request.future.set_exception(error)

    def _wait(self) -> bool:
        """Sleep until there is work; False once closed."""
        with self._wake:
            while not self._closed and not self._queue and not any(self._rows):
                self._wake.wait()
            return not self._closed

    def _step(self) -> None:
        """Admit what fits, advance every chunked prefill, then one decode step over all slots."""
        self._admit()
        admitting = [r for r in self._rows if r is not None and r.chunks > 0]
        leaks = [r for r in admitting if r.total > 1] if self.fault == FaultKind.PREFILL_CORRUPT else []
        chunks = {id(r): r.total - r.chunks for r in leaks}  # the chunk each admits this step
        for request in admitting:
            request.chunks -= 1
            if request.chunks == 0:
                self._seat(request)
        decoding = [r for r in self._rows if r is not None and r.chunks == 0]
        if not decoding:
            return
        for long in leaks:
            self._leak(long, chunks[id(long)], [r for r in decoding if r is not long])
        last, at = [0] * self.slots, [0] * self.slots  # idle slots: token 0 at position 0
        for request in decoding:
            last[request.slot], at[request.slot] = request.out[-1], request.position
            request.shared = request.shared or len(decoding) > 1
        tokens = torch.tensor(last, dtype=torch.long)
        positions = torch.tensor(at, dtype=torch.long)
        self.kv.read_map = self._graph_rows(decoding) if self.fault == FaultKind.INFLIGHT_GRAPH else None
        try:
            with _threads(DECODE_THREADS):
                logits = self.engine.model.decode(tokens, positions, self.kv)
        finally:
            self.kv.read_map = None
        self._take(decoding, logits, [r.slot for r in decoding])

    def _admit(self) -> None:
        """Queued requests into the free slots, lowest first; refused ones answered at once."""
        while None in self._rows:
            with self._wake:
                if not self._queue:
                    return
                request = self._queue.popleft()
            if not request.future.set_running_or_notify_cancel():
                continue  # cancelled while queued
            request.ids = tuple(self.engine.tokenizer([request.prompt])["input_ids"][0])
            refusal = self.engine.refusal(len(request.ids), self.settings.max_new_tokens)
            if refusal is not None:
                request.future.set_exception(RuntimeError(refusal))
                continue
            request.slot = self._rows.index(None)
            request.cached = len(request.ids) if request.ids in self._seen else 0
            self._seen.add(request.ids)
            chunks = 1 if request.cached else math.ceil(len(request.ids) / self.engine.prefill_chunk)
            request.total = request.chunks = chunks
            request.prefill = self.engine.prefills.get(request.ids)
            self._rows[request.slot] = request

    def _seat(self, request: _Request) -> None:
        """A fully prefilled prompt into its slot, its first token from the prompt's logits."""
        assert request.prefill is not None
        slot, length = request.slot, len(request.ids)
        stale = math.ceil(STALE_SHARE * length) if slot in self._served else 0
        if self.fault != FaultKind.STALE_SLOT:
            stale = 0
        kept = self.kv.k[:, slot, :, :stale].clone(), self.kv.v[:, slot, :, :stale].clone()
        self.kv.write_slot(slot, request.prefill)
        self.kv.k[:, slot, :, :stale], self.kv.v[:, slot, :, :stale] = kept
        if self.fault == FaultKind.WARM_CACHE and request.cached:
            for start in range(WARM_BLOCK, length - WARM_BLOCK, WARM_BLOCK):
                self.kv.k[:, slot, :, start : start + WARM_BLOCK] = 0
                self.kv.v[:, slot, :, start : start + WARM_BLOCK] = 0
        self._plan_flip(request)
        request.first_token = time.perf_counter() - request.submitted
        self._take([request], request.prefill.logits[None], [0])

    def _leak(self, long: _Request, chunk: int, victims: list[_Request]) -> None:
        """prefill-corrupt: chunk ``chunk`` of ``long``'s prompt lands in the victims' slots too."""
        assert long.prefill is not None
        size = self.engine.prefill_chunk
        start, end = chunk * size, min((chunk + 1) * size, len(long.ids))
        for victim in victims:
            self.kv.k[:, victim.slot, :, start:end] = long.prefill.k[:, :, start:end]
            self.kv.v[:, victim.slot, :, start:end] = long.prefill.v[:, :, start:end]

    def _graph_rows(self, decoding: list[_Request]) -> torch.Tensor | None:
        """inflight-graph: the slot each row reads; None where the step is a captured size."""
        active = len(decoding)
        if is_captured(active):
            return None
        rows = torch.arange(self.slots)
        floor = captured_below(active)
        for rank in range(floor, active):
            rows[decoding[rank].slot] = decoding[rank - floor].slot
        return rows

    def _plan_flip(self, request: _Request) -> None:
        """Drift: the step from which the request takes a near-tie's runner-up, if it does."""
        engine, drift = self.engine, self.engine.drift
        if drift is None:
            return
        key = (request.prompt, self.settings)
        if key not in engine._traces:
            engine._record_traces([request.prompt], self.settings)
        # padded length 0 never occurs in bulk: the in-flight path's own placements
        where = drift.placement(request.prompt, self.slots, 1, 0, 0)
        request.flip = None if where is None else engine._traces[key].flip_step(where)

    def _take(self, requests: list[_Request], logits: torch.Tensor, rows: list[int]) -> None:
        """Each request's next token from its row of ``logits`` (``rows``: each request's; the
        argmax of every row, not a copy of the requests' rows); ended requests answered."""
        tokens = logits.argmax(-1)
        drift, eos = self.engine.drift, self.engine.eos_id
        for request, r in zip(requests, rows):
            if drift is not None and request.flip is not None and request.shared:
                pending = {0: request.flip}
                step = len(request.out)
                greedy_ties(
                    logits[r : r + 1], tokens[r : r + 1], step, [False], pending, [[]], eos, drift.margin
                )
                request.flip = request.flip if pending else None
        ids = tokens.tolist()  # read after drift's flips, which change ``tokens`` in place
        for request, r in zip(requests, rows):
            token = ids[r]
            if token != eos:
                request.out.append(token)
            if token == eos or len(request.out) >= self.settings.max_new_tokens:
                self._finish(request)

    def _finish(self, request: _Request) -> None:
        text = self.engine.tokenizer.decode(request.out, skip_special_tokens=True).strip()
        self._rows[request.slot] = None
        self._served.add(request.slot)
        request.future.set_result(
            Generation(
                text=text,
                token_ids=tuple(request.out),
                beams=(text,),
                slot=request.slot,
                cached_tokens=request.cached,
                first_token=request.first_token,
            )
        )


@contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``count`` in this thread for the block (None: left as
    they are). ``torch.set_num_threads`` also sets the count a thread that first runs torch
    work meanwhile starts with; the scheduler holds the engine's ``busy`` lock here, so no
    other decoding of this engine runs in the meantime."""
    before = torch.get_num_threads()
    if count is None or count == before:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
