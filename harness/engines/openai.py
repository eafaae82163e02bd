"""The ``openai`` backend: an OpenAI-compatible server through ``/v1/completions``.

For trtllm-serve, vLLM, SGLang and ``python -m harness serve``; ``--engine`` is the server's
base URL, ``http://HOST:PORT/v1``. Standard library only (``http.client``).

Batch positions: a batch of size B is B requests in flight at once, one per prompt, sent in
position order: request i is connected and written before request i+1 starts, and the answers
are read once all are sent. On a server the position is therefore the *arrival slot*; the
server's scheduler (in-flight batching) decides which requests really share an engine step.
``python -m harness serve`` batches in arrival order, so there the slot is the engine's batch
position; it says where it put each request, and a batch it split or reordered fails the cell.
A failed batch (connection error, HTTP 5xx) is sent again whole, so that every prompt keeps
its slot; an HTTP 4xx or a timeout is not retried.

Decoding: ``temperature`` 0; a beam width W > 1 as ``use_beam_search: true, n: W, best_of: W,
length_penalty, early_stopping``. trtllm-serve takes the beam width from ``best_of`` (else
``n``) and rejects fields it does not know, so nothing else is sent; vLLM takes it from ``n``
(its beam-search path ignores ``best_of``). Both answer with W choices, the best first.
SGLang has no beam search: beam widths above 1 fail there.

Identity: the served model id from ``GET /v1/models`` (with its ``root`` where the server gives
one). It is only as good as the server's naming: two checkpoints served under one name share
an identity. Goldens for servers are therefore not committed; the baseline is batch size 1.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from harness import __version__
from harness.config import DecodingSettings
from harness.engines.base import EngineBase, EngineInfo, Generation
from harness.errors import EngineError

POSITION_SEMANTICS = ("arrival slot: requests are sent concurrently in position order; the "
                      "server's scheduler decides the real batch")
BEAM_SEARCH_FIELDS = ("use_beam_search", "n", "best_of", "length_penalty", "early_stopping")
LOAD_TIMEOUT_S = 10.0  # GET /v1/models answers at once on a live server
BACKOFF_S = 0.5  # before retry k: BACKOFF_S * 2**k
MESSAGE_CHARS = 300

T = TypeVar("T")


class ServerError(RuntimeError):
    """The server did not answer a batch usefully: that cell fails, the run goes on."""


class _Retryable(Exception):
    """A connection error or an HTTP 5xx: worth sending again."""


def _server_message(body: bytes) -> str:
    """The error text of an answer: OpenAI's {"error": {"message"}}, vLLM's and trtllm-serve's
    {"message"}, FastAPI's {"detail"}, else the start of the body."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        inner = data.get("error")
        for candidate in (inner.get("message") if isinstance(inner, dict) else inner,
                          data.get("message"), data.get("detail")):
            if candidate:
                text = str(candidate)
                break
    text = " ".join(text.split())
    return text[:MESSAGE_CHARS] + ("…" if len(text) > MESSAGE_CHARS else "") or "(empty body)"


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class OpenAIEngine(EngineBase):
    """Completions from an OpenAI-compatible server; one ``generate`` call = one batch of
    concurrent requests in position order (see the module docstring)."""

    def __init__(self, url: str, *, model: str | None = None, request_timeout: float = 600.0,
                 retries: int = 2, backoff: float = BACKOFF_S) -> None:
        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EngineError(f"--engine {url}: not a server address; use http://HOST:PORT/v1")
        if parts.username or parts.password:
            raise EngineError(f"--engine {url}: credentials in the address would be written to "
                              "the report; remove them")
        try:
            port = parts.port
        except ValueError:
            raise EngineError(f"--engine {url}: bad port; use http://HOST:PORT/v1") from None
        self.scheme, self.host = parts.scheme, parts.hostname
        self.port = port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/") or "/v1"
        self.request_timeout = float(request_timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.model, entry, served = self._choose_model(model)
        root = entry.get("root")
        identity = f"server:{self.model}"
        if isinstance(root, str) and root and root != self.model:
            identity += f"@{root}"
        self.info = EngineInfo(
            backend="openai", path=self.url, identity=identity, config=None,
            details={"position_semantics": POSITION_SEMANTICS,
                     "model": self.model, "served_models": served,
                     "model_entry": {k: v for k, v in entry.items() if k != "created"},
                     "identity_note": "the server's model id (and root): only as good as its naming",
                     "beam_search_fields": list(BEAM_SEARCH_FIELDS),
                     "request_timeout_s": self.request_timeout, "retries": self.retries})

    # --- HTTP -------------------------------------------------------------------------------

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def _send(self, conn: http.client.HTTPConnection, method: str, endpoint: str,
              body: dict[str, Any] | None = None) -> None:
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"Accept": "application/json", "User-Agent": f"batch-position-harness/{__version__}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, self.base_path + endpoint, body=data, headers=headers)

    @staticmethod
    def _read(conn: http.client.HTTPConnection) -> tuple[int, bytes]:
        response = conn.getresponse()
        return response.status, response.read()

    def _with_retries(self, attempt: Callable[[], T], fail: Callable[[str, int], Exception]) -> T:
        """attempt() again after a _Retryable, up to --retries times, with doubling backoff."""
        for k in range(self.retries + 1):
            try:
                return attempt()
            except _Retryable as exc:
                if k == self.retries:
                    raise fail(str(exc), k + 1) from None
                time.sleep(self.backoff * 2 ** k)
        raise AssertionError("unreachable")

    # --- model list (at load: fails fast, before any generation) ------------------------------

    def _choose_model(self, wanted: str | None) -> tuple[str, dict[str, Any], list[str]]:
        where = f"{self.host}:{self.port}"

        def attempt() -> tuple[int, bytes]:
            conn = self._connection(min(self.request_timeout, LOAD_TIMEOUT_S))
            try:
                self._send(conn, "GET", "/models")
                status, body = self._read(conn)
            except (OSError, http.client.HTTPException) as exc:
                raise _Retryable(_reason(exc)) from None
            finally:
                conn.close()
            if status >= 500:
                raise _Retryable(f"HTTP {status}: {_server_message(body)}")
            return status, body

        def fail(reason: str, attempts: int) -> Exception:
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            return EngineError(
                f"--engine {self.url}: cannot reach the server at {where}{tries} ({reason}); "
                f"start it (trtllm-serve, vllm serve, or `python -m harness serve --engine DIR "
                f"--port {self.port}`) or correct the address")

        status, body = self._with_retries(attempt, fail)
        listing = f"GET {self.base_path}/models"
        if status != 200:
            raise EngineError(f"--engine {self.url}: {listing} answered HTTP {status} "
                              f"({_server_message(body)}); give the server's OpenAI base URL, "
                              "e.g. http://HOST:PORT/v1")
        try:
            data = json.loads(body)
            entries = [e for e in data["data"] if isinstance(e, dict) and isinstance(e.get("id"), str)]
        except (ValueError, KeyError, TypeError):
            raise EngineError(f"--engine {self.url}: {listing} did not return an OpenAI model "
                              "list; is this an OpenAI-compatible server?") from None
        served = [e["id"] for e in entries]
        if wanted is not None:
            if entries and wanted not in served:
                raise EngineError(f"--model {wanted!r}: the server at {self.url} serves "
                                  f"{', '.join(served)}; pass one of those")
            return wanted, next((e for e in entries if e["id"] == wanted), {}), served
        if not entries:
            raise EngineError(f"--engine {self.url}: {listing} lists no model; pass --model NAME")
        return served[0], entries[0], served

    # --- generation ---------------------------------------------------------------------------

    def body(self, prompt: str, settings: DecodingSettings) -> dict[str, Any]:
        """The /v1/completions request for one prompt (only fields trtllm-serve and vLLM know)."""
        body: dict[str, Any] = {"model": self.model, "prompt": prompt,
                                "max_tokens": settings.max_new_tokens, "temperature": 0.0, "n": 1}
        if settings.beam_width > 1:
            body.update(use_beam_search=True, n=settings.beam_width, best_of=settings.beam_width,
                        length_penalty=settings.length_penalty,
                        early_stopping=settings.early_stopping)
        return body

    def _attempt(self, bodies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """One try at a batch: every request on the wire in position order, then every answer."""
        conns: list[http.client.HTTPConnection] = []
        try:
            for body in bodies:
                conn = self._connection(self.request_timeout)
                conns.append(conn)
                self._send(conn, "POST", "/completions", body)
            answers = [self._read(c) for c in conns]
        except TimeoutError:
            raise ServerError(f"{self.url}: no answer within {self.request_timeout:g} s "
                              f"(--request-timeout {self.request_timeout:g}); raise it or check "
                              "the server") from None
        except (OSError, http.client.HTTPException) as exc:
            raise _Retryable(f"{type(exc).__name__}: {_reason(exc)}") from None
        finally:
            for c in conns:
                c.close()
        for position, (status, body) in enumerate(answers):
            if status >= 500:
                raise _Retryable(f"HTTP {status} at position {position}: {_server_message(body)}")
        payloads = []
        for position, (status, body) in enumerate(answers):
            if status != 200:
                raise ServerError(f"{self.url}: HTTP {status} at position {position}: "
                                  f"{_server_message(body)}")
            try:
                payloads.append(json.loads(body))
            except ValueError:
                raise ServerError(f"{self.url}: position {position}: the answer is not JSON "
                                  f"({_server_message(body)})") from None
        return payloads

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        bodies = [self.body(p, settings) for p in prompts]

        def fail(reason: str, attempts: int) -> Exception:
            return ServerError(f"{self.url}: a batch of {len(bodies)} failed {attempts} time(s) "
                               f"(--retries {self.retries}); last: {reason}")

        payloads = self._with_retries(lambda: self._attempt(bodies), fail)
        results = [self._generation(p, position) for position, p in enumerate(payloads)]
        self._check_slots(payloads)
        return results

    def _generation(self, payload: Any, position: int) -> Generation:
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices or not all(
                isinstance(c, dict) and isinstance(c.get("text"), str) for c in choices):
            raise ServerError(f"{self.url}: position {position}: the answer has no choices with "
                              "text; is this a /v1/completions endpoint?")
        ordered = sorted(enumerate(choices), key=lambda ic: (ic[1].get("index", ic[0]), ic[0]))
        texts = tuple(c["text"].strip() for _, c in ordered)
        ids = ordered[0][1].get("token_ids")
        token_ids = tuple(ids) if isinstance(ids, list) and all(isinstance(t, int) for t in ids) else ()
        return Generation(text=texts[0], token_ids=token_ids, beams=texts)

    def _check_slots(self, payloads: Sequence[Any]) -> None:
        """Where a server says how it batched (``python -m harness serve`` does), the batch
        must be exactly the planned one: one engine batch, slot i at position i."""
        marks = [p.get("harness_batch") if isinstance(p, dict) else None for p in payloads]
        if not marks or not all(isinstance(m, dict) for m in marks):
            return
        ids = [m.get("id") for m in marks]
        positions = [m.get("position") for m in marks]
        if len(set(ids)) != 1 or positions != list(range(len(payloads))):
            raise ServerError(f"{self.url}: the server did not keep the planned batch (engine "
                              f"batches {ids}, positions {positions} for slots 0..{len(payloads) - 1});"
                              " give `python -m harness serve` a longer --batch-window-ms")
