"""The ``openai`` backend: an OpenAI-compatible server through ``/v1/completions``.

For trtllm-serve, vLLM, SGLang and ``python -m harness serve``; ``--engine`` is the server's
base URL, ``http://HOST:PORT/v1``. Standard library only (``http.client``).

Batch positions: a batch of size B is B requests in flight at once, one per prompt, sent in
position order: request i is connected and written before request i+1 starts; each answer is
read on a thread of its own as soon as its request is written, and timed (``http_batch``). On a
server the position is therefore the *arrival slot*; the server's scheduler (in-flight
batching) decides which requests really share an engine step. ``python -m harness serve``
batches in arrival order, so there the slot is the engine's batch position; it says where it
put each request, and a batch it split or reordered fails the cell. Every answer carries its
timing (``Generation.timing``), from which the generate stage tells a server that answered a
batch one request at a time (``harness.engines.batching``): such a cell is untested.

Each request must be answered within --request-timeout of its send, the whole answer, not each
read (a server trickling its answer a byte at a time is cut off there). A failed batch
(connection error, HTTP 5xx) is sent again whole, so that every prompt keeps its slot; the
error names the first symptom and the last. An HTTP 4xx or a timeout is not retried.

Decoding: greedy, or beam search through the fields trtllm-serve and vLLM take
(``harness.engines.completions`` builds the request and reads the answer). Every answer is
checked for the beam search it was asked for (``harness.engines.beams``): fewer than W
choices, or W identical ones with no evidence of beam search, fail the cell with the reason
(llama-cpp-python and llama-server do not run beam search). SGLang has no beam search: beam
widths above 1 fail there.

In flight (``in_flight``, issue 33): each request on a connection and a worker thread of its own
as the schedule sends it, the bulk path's request for one prompt with its timeout, retries and
errors; what the answers say of slots and cached prompt tokens is read where the server gives
it (``harness.engines.openai_inflight``).

The key a server wants comes from the environment, and the address may not hold credentials
(``harness.engines.server_address``).

Identity: the served model id from ``GET /v1/models`` (with its ``root`` where the server gives
one). It is only as good as the server's naming: two checkpoints served under one name share
an identity. Goldens for servers are therefore not committed; the baseline is batch size 1.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from harness import __version__
from harness.config import DecodingSettings, EngineOptions
from harness.config.parse import Json
from harness.engines import completions
from harness.engines.base import EngineBase, FailureKind, Generation, InFlight, NoInFlight
from harness.engines.beams import BeamCheck
from harness.engines.completions import BEAM_SEARCH_FIELDS, ServerError, server_message
from harness.engines.http_batch import Answer, Connect, send_batch
from harness.engines.server_address import address, api_key
from harness.errors import EngineError
from harness.model.engine import EngineInfo, KvCacheReuse
from harness.model.vocab import Backend, CacheReuse
from harness.redact import redact_url, remember_url

if TYPE_CHECKING:
    from harness.engines.openai_inflight import OpenAIInFlight

POSITION_SEMANTICS = (
    "arrival slot: requests are sent concurrently in position order; the "
    "server's scheduler decides the real batch"
)
SERVER_REUSE = KvCacheReuse(
    CacheReuse.UNKNOWN,
    "a server decides and the OpenAI API has no setting for it (vLLM's prefix "
    "caching and llama-server's cache_prompt are on by default): a prompt sent again may have "
    "its prefill served from an earlier request's cached blocks, which hides a fault in prefill",
)
LOAD_TIMEOUT_S = 10.0  # GET /v1/models answers at once on a live server
BACKOFF_S = 0.5  # before retry k: BACKOFF_S * 2**k

T = TypeVar("T")


class _Retryable(Exception):
    """A connection error or an HTTP 5xx: worth sending again."""

    def __init__(self, message: str, kind: FailureKind = FailureKind.UNREACHABLE) -> None:
        super().__init__(message)
        self.kind = kind


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class OpenAIEngine(EngineBase):
    """Completions from an OpenAI-compatible server; one ``generate`` call = one batch of
    concurrent requests in position order (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        request_timeout: float = EngineOptions.request_timeout,
        retries: int = EngineOptions.retries,
        backoff: float = BACKOFF_S,
        api_key_env: str | None = None,
    ) -> None:
        remember_url(url)  # its credentials are redacted from every string from now on
        self.url = url.rstrip("/")  # what requests go to; never shown (see ``shown``)
        self.shown = redact_url(self.url)
        self.scheme, self.host, self.port, self.base_path, self.query = address(self.url)
        self._key, key_from = api_key(api_key_env)  # never stored anywhere else
        self.request_timeout = float(request_timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.beams = BeamCheck()
        self.opened: list[OpenAIInFlight] = []  # in-flight paths, closed with the engine
        self.model, entry, served = self._choose_model(model)
        root = entry.get("root")
        identity = f"server:{self.model}"
        if isinstance(root, str) and root and root != self.model:
            identity += f"@{root}"
        self.info = EngineInfo(
            kv_cache_reuse=SERVER_REUSE,
            backend=Backend.OPENAI,
            path=self.shown,
            identity=identity,
            details={
                "position_semantics": POSITION_SEMANTICS,
                "model": self.model,
                "served_models": served,
                "model_entry": {k: v for k, v in entry.items() if k != "created"},
                "identity_note": "the server's model id (and root): only as good as its naming",
                "beam_search_fields": list(BEAM_SEARCH_FIELDS),
                # the variable the key was read from (sent as Authorization: Bearer)
                "key_from": key_from,
                "request_timeout_s": self.request_timeout,
                "retries": self.retries,
            },
        )

    # --- HTTP -------------------------------------------------------------------------------

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def _path(self, endpoint: str) -> str:
        """The request path; the address's query string (a key the server wants) goes along."""
        return self.base_path + endpoint + (f"?{self.query}" if self.query else "")

    def _headers(self, body: bool) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": f"batch-position-harness/{__version__}"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        if body:
            headers["Content-Type"] = "application/json"
        return headers

    def _with_retries(
        self,
        attempt: Callable[[], T],
        fail: Callable[[_Retryable, int, str], Exception],
        stop: threading.Event | None = None,
    ) -> T:
        """attempt() again after a _Retryable, up to --retries times, with doubling backoff;
        ``fail(last failure, attempts, first reason)`` once they are used up. ``stop`` set
        (an in-flight path closing) cuts the backoff short."""
        first = ""
        for k in range(self.retries + 1):
            try:
                return attempt()
            except _Retryable as exc:
                first = first or str(exc)
                if k == self.retries:
                    raise fail(exc, k + 1, first) from None
                if stop is None:
                    time.sleep(self.backoff * 2**k)
                else:
                    stop.wait(self.backoff * 2**k)
        raise AssertionError("unreachable")

    # --- model list (at load: fails fast, before any generation) ------------------------------

    def _get_models(self) -> tuple[int, bytes]:
        conn = self._connection(min(self.request_timeout, LOAD_TIMEOUT_S))
        try:
            conn.request("GET", self._path("/models"), headers=self._headers(False))
            response = conn.getresponse()
            status, body = response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise _Retryable(_reason(exc)) from None
        finally:
            conn.close()
        if status >= 500:
            raise _Retryable(f"HTTP {status}: {server_message(body)}")
        return status, body

    def _choose_model(self, wanted: str | None) -> tuple[str, dict[str, Json], list[str]]:
        where = f"{self.host}:{self.port}"

        def fail(last: _Retryable, attempts: int, first: str) -> Exception:
            reason = str(last)
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            return EngineError(
                f"--engine {self.shown}: cannot reach the server at {where}{tries} ({reason}); "
                f"start it (trtllm-serve, vllm serve, or `python -m harness serve --engine DIR "
                f"--port {self.port}`) or correct the address"
            )

        status, body = self._with_retries(self._get_models, fail)
        listing = f"GET {self.base_path}/models"
        if status != 200:
            raise EngineError(
                f"--engine {self.shown}: {listing} answered HTTP {status} "
                f"({server_message(body)}); give the server's OpenAI base URL, "
                "e.g. http://HOST:PORT/v1"
            )
        try:
            data = json.loads(body)
            entries = [e for e in data["data"] if isinstance(e, dict) and isinstance(e.get("id"), str)]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise EngineError(
                f"--engine {self.shown}: {listing} did not return an OpenAI model "
                "list; is this an OpenAI-compatible server?"
            ) from None
        served = [e["id"] for e in entries]
        if wanted is not None:
            if entries and wanted not in served:
                raise EngineError(
                    f"--model {wanted!r}: the server at {self.shown} serves "
                    f"{', '.join(served)}; pass one of those"
                )
            return wanted, next((e for e in entries if e["id"] == wanted), {}), served
        if not entries:
            raise EngineError(f"--engine {self.shown}: {listing} lists no model; pass --model NAME")
        return served[0], entries[0], served

    # --- generation ---------------------------------------------------------------------------

    def body(self, prompt: str, settings: DecodingSettings) -> dict[str, Json]:
        """The /v1/completions request for one prompt (``completions.request_body``)."""
        return completions.request_body(self.model, prompt, settings)

    def _attempt(
        self, bodies: Sequence[dict[str, Json]], connect: Connect | None = None
    ) -> list[tuple[dict[str, Json], Answer]]:
        """One try at a batch: every request on the wire in position order, every answer read
        as it comes, each within --request-timeout of its send (see ``http_batch``); its
        connections from ``connect`` where given (the in-flight path's, which it can shut)."""
        try:
            answers = self._exchange(bodies) if connect is None else self._send(bodies, connect)
        except TimeoutError:
            raise self._timeout() from None
        except (OSError, http.client.HTTPException) as exc:
            raise _Retryable(f"{type(exc).__name__}: {_reason(exc)}") from None
        if any(a.timed_out or isinstance(a.error, TimeoutError) for a in answers):
            raise self._timeout()
        for position, a in enumerate(answers):
            if a.error is not None:
                raise _Retryable(f"{type(a.error).__name__} at position {position}: {_reason(a.error)}")
        for position, a in enumerate(answers):
            if a.status is not None and a.status >= 500:
                raise _Retryable(
                    f"HTTP {a.status} at position {position}: {server_message(a.body)}",
                    FailureKind.SERVER_ERROR,
                )
        return [(completions.payload(a, position, self.shown), a) for position, a in enumerate(answers)]

    def _exchange(self, bodies: Sequence[dict[str, Json]]) -> list[Answer]:
        """The HTTP exchange of one try (a subclass that records answers wraps this)."""
        return self._send(bodies, self._connection)

    def _send(self, bodies: Sequence[dict[str, Json]], connect: Connect) -> list[Answer]:
        return send_batch(
            connect, self._path("/completions"), bodies, self._headers(True), self.request_timeout
        )

    def _timeout(self) -> ServerError:
        t = self.request_timeout
        return ServerError(
            f"{self.shown}: no complete answer within {t:g} s of the request "
            f"(--request-timeout {t:g}, which bounds the whole answer); raise it or "
            "check the server",
            FailureKind.TIMEOUT,
        )

    def _failed(self, size: int) -> Callable[[_Retryable, int, str], Exception]:
        """What a batch of ``size`` whose retries are used up raises: its first symptom and last."""

        def fail(last: _Retryable, attempts: int, first: str) -> Exception:
            reason = str(last)
            symptoms = f"first: {first}; last: {reason}" if first != reason else f"last: {reason}"
            return ServerError(
                f"{self.shown}: a batch of {size} failed {attempts} time(s) "
                f"(--retries {self.retries}); {symptoms}",
                last.kind,
            )

        return fail

    def _request_one(
        self, body: dict[str, Json], connect: Connect, stop: threading.Event
    ) -> tuple[dict[str, Json], Answer]:
        """One request alone, as a batch of one with the bulk path's timeout, retries and errors:
        its answer's JSON object and the answer (the in-flight path). Connections come from
        ``connect``; ``stop`` set cuts the backoff between tries short."""
        return self._with_retries(lambda: self._attempt([body], connect), self._failed(1), stop)[0]

    def in_flight(self, settings: DecodingSettings) -> InFlight | NoInFlight:
        """Requests sent one by one, each on its own connection (``harness.engines.openai_inflight``);
        a beam width above 1 sends the bulk path's beam fields and checks each answer as it does."""
        from harness.engines.openai_inflight import OpenAIInFlight

        path = OpenAIInFlight(self, settings)
        self.opened.append(path)
        return path

    def close(self) -> None:
        """Close every in-flight path still open (closing one twice does nothing)."""
        while self.opened:
            self.opened.pop().close()

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        bodies = [self.body(p, settings) for p in prompts]
        answered = self._with_retries(lambda: self._attempt(bodies), self._failed(len(bodies)))
        payloads = [payload for payload, _ in answered]
        results = [
            completions.generation(p, a, position, self.shown) for position, (p, a) in enumerate(answered)
        ]
        completions.check_slots(payloads, self.shown)
        self._check_beams(settings, payloads, results)
        return results

    def _check_beams(
        self,
        settings: DecodingSettings,
        payloads: Sequence[Mapping[str, Json]],
        results: Sequence[Generation],
    ) -> None:
        """Fewer than W choices, or W identical ones with no other evidence: no beam search
        ran, and the cell fails with the reason (``harness.engines.beams``)."""
        reported = [completions.reported_width(p) for p in payloads]
        reason = self.beams.check(settings, [g.beams for g in results], reported)
        if reason is not None:
            raise ServerError(f"{self.shown}: {reason}", FailureKind.NO_BEAM_SEARCH)
