"""The openai backend's in-flight path: each request sent alone, the moment a schedule sends it.

``OpenAIEngine.in_flight(settings)`` opens an ``OpenAIInFlight``. ``submit(prompt)`` sends the
request the bulk path sends for that prompt (``OpenAIEngine.body``) to ``/v1/completions`` from a
worker thread of its own, on a connection of its own, with the bulk path's --request-timeout,
--retries and error texts (a batch of one, ``OpenAIEngine._request_one``). Requests sent while
others are unanswered are therefore on the server together, and its scheduler (llama-server's
slots, vLLM's and trtllm-serve's in-flight batching) decides which share an engine step. The
workers open their first connections in the order of the ``submit`` calls, so that requests
sent back to back (a schedule's first wave) reach the server in that order, as the bulk path's
do in position order; a retry goes when it is due.

What a ``Generation`` says beyond the bulk path's text, beams and timing (timed from the path's
opening), where the server's answers give it (``harness.engines.completions``):

- ``cached_tokens``: llama-server's ``timings.cache_n``, else OpenAI's and vLLM's
  ``usage.prompt_tokens_details.cached_tokens``; ``cache`` then names the field. Never
  llama-server's ``tokens_cached``, which counts what the slot holds after the request.
- ``slot``: llama-server's ``id_slot``; its ``/v1/completions`` answers carry it only in
  ``__verbose``, a debugging field (verbose logging, or ``--request-field verbose=true``), so
  usually None.
- ``slots``: llama-server's ``total_slots`` (its --parallel) from ``GET /props`` at the server's
  root, asked once at opening; any other answer, or none within ``PROPS_TIMEOUT_S``: None.

Beam widths above 1 send the bulk path's beam fields, and every answer is checked as the bulk
path checks it (the engine's ``BeamCheck``, shared with it): a server without beam search fails
the request with the bulk path's reason. ``python -m harness serve``'s ``harness_batch`` is not
checked here: requests sent one by one make no planned batch to keep.

``close()`` starts no request and no retry, shuts the sockets of requests still unanswered
(their ``result()`` raises that the path was closed) and joins every worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Protocol

from harness.config import DecodingSettings
from harness.config.parse import Json
from harness.engines import completions
from harness.engines.base import Generation, InFlight, Pending, RequestTiming
from harness.engines.completions import ServerError
from harness.engines.http_batch import Answer, Connect
from harness.model.vocab import FailureKind


class Server(Protocol):
    """What the in-flight path uses of the openai backend (``Server``): the address its
    requests go to, how it connects and what it sends, one request with the bulk path's retries
    and errors, and its check of beam answers."""

    shown: str
    base_path: str
    query: str
    request_timeout: float

    def _connection(self, timeout: float) -> http.client.HTTPConnection: ...

    def _headers(self, body: bool) -> dict[str, str]: ...

    def body(self, prompt: str, settings: DecodingSettings) -> dict[str, Json]: ...

    def _request_one(
        self, body: dict[str, Json], connect: Connect, stop: threading.Event
    ) -> tuple[dict[str, Json], Answer]: ...

    def _check_beams(
        self,
        settings: DecodingSettings,
        payloads: Sequence[Mapping[str, Json]],
        results: Sequence[Generation],
    ) -> None: ...


PROPS_TIMEOUT_S = 5.0  # GET /props answers at once on a live llama-server
WORKER = "harness-openai-inflight"  # the workers' thread name
JOIN_S = 10.0  # close(): the longest wait for the workers once their sockets are shut
NOT_SAID = (
    "the server's answers do not say whether it served prompt tokens from a cache (a server decides: "
    "vLLM's prefix caching and llama-server's cache_prompt are on by default)"
)


def said_slots(engine: Server) -> int | None:
    """llama-server's slot count (``GET /props`` at the server's root: ``total_slots``), or None
    where the server does not answer that question; never raises."""
    root = engine.base_path.removesuffix("/v1")
    path = root + "/props" + (f"?{engine.query}" if engine.query else "")
    try:
        conn = engine._connection(min(engine.request_timeout, PROPS_TIMEOUT_S))
        try:
            conn.request("GET", path, headers=engine._headers(False))
            response = conn.getresponse()
            status, body = response.status, response.read()
        finally:
            conn.close()
        data = json.loads(body) if status == 200 else None
    except (OSError, http.client.HTTPException, ValueError, RecursionError):
        return None
    total = data.get("total_slots") if isinstance(data, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class OpenAIInFlight(InFlight):
    """Requests to an OpenAI-compatible server for one decoding setting, each sent alone from a
    worker thread (see the module docstring); ``submit`` is safe from any thread."""

    def __init__(self, engine: Server, settings: DecodingSettings) -> None:
        self.engine, self.settings = engine, settings
        self.slots = said_slots(engine)
        self.cache = NOT_SAID
        self.opened = time.monotonic()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._workers: set[threading.Thread] = set()
        self._sockets: set[socket.socket] = set()  # of requests not yet answered
        self._fields: set[str] = set()  # the answers' fields that said cached prompt tokens
        self._turn = threading.Condition(self._lock)  # first connections in submit order:
        self._submitted = self._connected = 0  # requests submitted, and first connections made

    def submit(self, prompt: str) -> Pending:
        body = self.engine.body(prompt, self.settings)
        future: Future[Generation] = Future()
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError("the openai in-flight path is closed; open another with in_flight()")
            worker = threading.Thread(
                target=self._work, args=(body, future, self._submitted), name=WORKER, daemon=True
            )
            self._submitted += 1
            self._workers.add(worker)
        worker.start()
        return future

    def close(self) -> None:
        """No new request or retry; unanswered requests' sockets shut; every worker joined."""
        with self._lock:
            self._closed.set()
            self._turn.notify_all()
            sockets, workers = list(self._sockets), list(self._workers)
        for sock in sockets:
            _shut(sock)
        end = time.monotonic() + JOIN_S
        for worker in workers:
            if worker is not threading.current_thread():
                worker.join(max(0.0, end - time.monotonic()))

    @property
    def running(self) -> int:
        """How many workers are still alive."""
        with self._lock:
            return sum(w.is_alive() for w in self._workers)

    # -- a worker's thread -----------------------------------------------------------------

    def _work(self, body: dict[str, Json], future: Future[Generation], turn: int) -> None:
        try:
            generation = self._request(body, turn)
        except BaseException as exc:  # the reader of result() hears of it, whatever it is
            if self._closed.is_set():
                exc = ServerError(
                    f"{self.engine.shown}: the in-flight path was closed before this request's answer "
                    f"came back ({exc})",
                    FailureKind.SERVER_ERROR,
                )
            future.set_exception(exc)
        else:
            future.set_result(generation)
        finally:
            with self._lock:
                self._workers.discard(threading.current_thread())
                self._pass(turn)  # where it never connected: the next may go

    def _pass(self, turn: int) -> None:
        """``turn``'s first connection is made (or never will be): the next one's turn. Under
        the lock."""
        if self._connected == turn:
            self._connected += 1
            self._turn.notify_all()

    def _request(self, body: dict[str, Json], turn: int) -> Generation:
        """One request, its answer read as the bulk path reads it, with slot and cached tokens."""
        engine = self.engine
        mine: list[socket.socket] = []
        started: list[float] = []

        def connect(timeout: float) -> http.client.HTTPConnection:
            """The engine's connection, connected now (the first in its turn) so that close() can
            shut its socket; none once the path is closed (every try left fails at once)."""
            with self._lock:
                while self._connected < turn and not self._closed.is_set():
                    self._turn.wait()
            if self._closed.is_set():
                raise ConnectionAbortedError("the in-flight path is closed")
            started.append(time.monotonic())
            conn = engine._connection(timeout)
            try:
                conn.connect()
            finally:
                with self._lock:
                    self._pass(turn)
            with self._lock:
                if conn.sock is not None:
                    mine.append(conn.sock)
                    self._sockets.add(conn.sock)
                closed = self._closed.is_set()
            if closed and conn.sock is not None:
                _shut(conn.sock)
            return conn

        try:
            payload, answer = engine._request_one(body, connect, self._closed)
        finally:
            with self._lock:
                self._sockets.difference_update(mine)
        generation = completions.generation(payload, answer, 0, engine.shown)
        with self._lock:  # the engine's BeamCheck counts answers across threads
            engine._check_beams(self.settings, [payload], [generation])
        cached, fields = completions.cached_tokens(payload)
        if fields:
            self._said(fields)
        return dataclasses.replace(
            generation,
            timing=_shifted(generation.timing, (started[-1] if started else self.opened) - self.opened),
            slot=completions.slot(payload),
            cached_tokens=cached,
        )

    def _said(self, fields: tuple[str, ...]) -> None:
        """An answer said its cached prompt tokens in ``fields``: ``cache`` names them."""
        with self._lock:
            self._fields.update(fields)
            named = [f for f in completions.CACHED_TOKEN_FIELDS if f in self._fields]
            self.cache = (
                "the server says in each answer how many prompt tokens it served from its prompt cache "
                f"({' and '.join(named)})"
            )


def _shifted(timing: RequestTiming | None, by: float) -> RequestTiming | None:
    """``timing`` from the path's opening rather than from its request's send."""
    if timing is None:
        return None
    return dataclasses.replace(
        timing,
        sent=timing.sent + by,
        written=timing.written + by,
        first_byte=timing.first_byte + by,
        finished=timing.finished + by,
    )
