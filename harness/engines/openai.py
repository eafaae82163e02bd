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

Decoding: ``temperature`` 0; a beam width W > 1 as ``use_beam_search: true, n: W, best_of: W,
length_penalty, early_stopping``; then the --request-field fields. trtllm-serve takes the beam
width from ``best_of`` (else ``n``) and rejects fields it does not know, so nothing else is
sent; vLLM takes it from ``n`` (its beam-search path ignores ``best_of``). Both answer with W
choices, the best first. Every answer is checked for the beam search it was asked for
(``harness.engines.beams``): fewer than W choices, or W identical ones with no evidence of
beam search, fail the cell with the reason (llama-cpp-python and llama-server do not run
beam search). SGLang has no beam search: beam widths above 1 fail there.

The key a server wants is read from the environment when the engine loads: the variable named
by --api-key-env, else ``OPENAI_API_KEY`` when set (as OpenAI's clients do); it is sent as
``Authorization: Bearer KEY`` with every request. Only the variable's name is in the run's
options (report.json); the value is remembered as a secret (``harness.redact``), so it is
redacted wherever a string leaves the process, a server's error body that echoes it included
(``harness.outside``). A gateway that wants its key in the query string (``?api_key=...``)
gets it there: every query value is redacted the same way. ``user:password@`` is refused.

Identity: the served model id from ``GET /v1/models`` (with its ``root`` where the server gives
one). It is only as good as the server's naming: two checkpoints served under one name share
an identity. Goldens for servers are therefore not committed; the baseline is batch size 1.
"""

from __future__ import annotations

import http.client
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from harness import __version__
from harness.config import OPENAI_KEY_VARIABLE, DecodingSettings, EngineOptions
from harness.engines.base import BatchError, EngineBase, FailureKind, Generation
from harness.engines.beams import BeamCheck
from harness.engines.http_batch import Answer, send_batch
from harness.errors import EngineError
from harness.model.engine import EngineInfo, KvCacheReuse
from harness.model.vocab import Backend, CacheReuse
from harness.redact import redact, redact_url, remember, remember_url

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
BEAM_SEARCH_FIELDS = ("use_beam_search", "n", "best_of", "length_penalty", "early_stopping")
LOAD_TIMEOUT_S = 10.0  # GET /v1/models answers at once on a live server
BACKOFF_S = 0.5  # before retry k: BACKOFF_S * 2**k
MESSAGE_CHARS = 300

T = TypeVar("T")


class ServerError(BatchError):
    """The server did not answer a batch usefully: that cell fails, the run goes on."""


class _Retryable(Exception):
    """A connection error or an HTTP 5xx: worth sending again."""

    def __init__(self, message: str, kind: FailureKind = FailureKind.UNREACHABLE) -> None:
        super().__init__(message)
        self.kind = kind


def api_key(variable: str | None, environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(the key, the variable it came from): ``variable`` (--api-key-env), which must be set,
    else OPENAI_API_KEY when set, else no key. The key is remembered as a secret (redacted
    from every string from now on). EngineError naming the variable, never its value, when it
    is unset, empty or not a single header token."""
    env = os.environ if environ is None else environ
    name = variable or OPENAI_KEY_VARIABLE
    value = (env.get(name) or "").strip()
    if not value:
        if variable is None:
            return None, None
        state = "empty" if name in env else "not set"
        raise EngineError(
            f"--api-key-env {name}: the environment variable {name} is {state}; "
            f"export {name}=KEY before the run, or drop --api-key-env"
        )
    remember(value)
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise EngineError(
            f"${name}: the key holds a space or a control character, which cannot "
            "be sent in an Authorization header; set the variable to the key alone"
        )
    return value, name


def _server_message(body: bytes) -> str:
    """The error text of an answer: OpenAI's {"error": {"message"}}, vLLM's and trtllm-serve's
    {"message"}, FastAPI's {"detail"}, else the start of the body. Secrets are redacted before
    it is cut to MESSAGE_CHARS, so that no cut leaves a piece of a key that no longer matches
    (everything else about outside text is done where it leaves the process:
    ``harness.outside``)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        inner = data.get("error")
        for candidate in (
            inner.get("message") if isinstance(inner, dict) else inner,
            data.get("message"),
            data.get("detail"),
        ):
            if candidate:
                text = str(candidate)
                break
    text = redact(" ".join(text.split()))
    return text[:MESSAGE_CHARS] + ("…" if len(text) > MESSAGE_CHARS else "") or "(empty body)"


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _address(url: str) -> tuple[str, str, int, str, str]:
    """(scheme, host, port, base path, query) of a server address; EngineError if it is not
    one. Credentials in it are refused (the message shows the address redacted)."""
    shown = redact_url(url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineError(f"--engine {shown}: not a server address; use http://HOST:PORT/v1")
    if parts.username or parts.password:
        raise EngineError(
            f"--engine {shown}: credentials in the address end up in shell "
            f"history and CI logs; remove them and export the key in "
            f"{OPENAI_KEY_VARIABLE} (or another variable named by --api-key-env), "
            "which is sent as Authorization: Bearer"
        )
    try:
        port = parts.port
    except ValueError:
        raise EngineError(f"--engine {shown}: bad port; use http://HOST:PORT/v1") from None
    return (
        parts.scheme,
        parts.hostname,
        port or (443 if parts.scheme == "https" else 80),
        parts.path.rstrip("/") or "/v1",
        parts.query,
    )


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
        self.scheme, self.host, self.port, self.base_path, self.query = _address(self.url)
        self._key, key_from = api_key(api_key_env)  # never stored anywhere else
        self.request_timeout = float(request_timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.beams = BeamCheck()
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

    def _with_retries(self, attempt: Callable[[], T], fail: Callable[[_Retryable, int, str], Exception]) -> T:
        """attempt() again after a _Retryable, up to --retries times, with doubling backoff;
        ``fail(last failure, attempts, first reason)`` once they are used up."""
        first = ""
        for k in range(self.retries + 1):
            try:
                return attempt()
            except _Retryable as exc:
                first = first or str(exc)
                if k == self.retries:
                    raise fail(exc, k + 1, first) from None
                time.sleep(self.backoff * 2**k)
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
            raise _Retryable(f"HTTP {status}: {_server_message(body)}")
        return status, body

    def _choose_model(self, wanted: str | None) -> tuple[str, dict[str, Any], list[str]]:
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
                f"({_server_message(body)}); give the server's OpenAI base URL, "
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

    def body(self, prompt: str, settings: DecodingSettings) -> dict[str, Any]:
        """The /v1/completions request for one prompt: the harness's fields (only those
        trtllm-serve and vLLM know), then the --request-field ones."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": settings.max_new_tokens,
            "temperature": 0.0,
            "n": 1,
        }
        if settings.beam_width > 1:
            body.update(
                use_beam_search=True,
                n=settings.beam_width,
                best_of=settings.beam_width,
                length_penalty=settings.length_penalty,
                early_stopping=settings.early_stopping,
            )
        body.update(settings.extra_fields())
        return body

    def _attempt(self, bodies: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], Answer]]:
        """One try at a batch: every request on the wire in position order, every answer read
        as it comes, each within --request-timeout of its send (see ``http_batch``)."""
        try:
            answers = self._exchange(bodies)
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
                    f"HTTP {a.status} at position {position}: {_server_message(a.body)}",
                    FailureKind.SERVER_ERROR,
                )
        return [(self._payload(a, position), a) for position, a in enumerate(answers)]

    def _exchange(self, bodies: Sequence[dict[str, Any]]) -> list[Answer]:
        """The HTTP exchange of one try (a subclass that records answers wraps this)."""
        return send_batch(
            self._connection, self._path("/completions"), bodies, self._headers(True), self.request_timeout
        )

    def _timeout(self) -> ServerError:
        t = self.request_timeout
        return ServerError(
            f"{self.shown}: no complete answer within {t:g} s of the request "
            f"(--request-timeout {t:g}, which bounds the whole answer); raise it or "
            "check the server",
            FailureKind.TIMEOUT,
        )

    def _payload(self, answer: Answer, position: int) -> dict[str, Any]:
        if answer.status != 200:
            raise ServerError(
                f"{self.shown}: HTTP {answer.status} at position {position}: {_server_message(answer.body)}",
                FailureKind.REFUSED,
            )
        try:
            payload = json.loads(answer.body)
        except (ValueError, RecursionError):
            payload = None
        if not isinstance(payload, dict):
            raise ServerError(
                f"{self.shown}: position {position}: the answer is not a JSON object "
                f"({_server_message(answer.body)})",
                FailureKind.BAD_ANSWER,
            )
        return payload

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        bodies = [self.body(p, settings) for p in prompts]

        def fail(last: _Retryable, attempts: int, first: str) -> Exception:
            reason = str(last)
            symptoms = f"first: {first}; last: {reason}" if first != reason else f"last: {reason}"
            return ServerError(
                f"{self.shown}: a batch of {len(bodies)} failed {attempts} time(s) "
                f"(--retries {self.retries}); {symptoms}",
                last.kind,
            )

        answered = self._with_retries(lambda: self._attempt(bodies), fail)
        payloads = [payload for payload, _ in answered]
        results = [self._generation(p, a, position) for position, (p, a) in enumerate(answered)]
        self._check_slots(payloads)
        self._check_beams(settings, payloads, results)
        return results

    def _generation(self, payload: dict[str, Any], answer: Answer, position: int) -> Generation:
        choices = payload.get("choices")
        if (
            not isinstance(choices, list)
            or not choices
            or not all(isinstance(c, dict) and isinstance(c.get("text"), str) for c in choices)
        ):
            raise ServerError(
                f"{self.shown}: position {position}: the answer has no choices with "
                "text; is this a /v1/completions endpoint?",
                FailureKind.BAD_ANSWER,
            )
        ordered = sorted(enumerate(choices), key=lambda ic: (_index(ic[1], ic[0]), ic[0]))
        texts = tuple(c["text"].strip() for _, c in ordered)
        ids = ordered[0][1].get("token_ids")
        token_ids = tuple(ids) if isinstance(ids, list) and all(isinstance(t, int) for t in ids) else ()
        return Generation(
            text=texts[0],
            token_ids=token_ids,
            beams=texts,
            timing=answer.timing(_completion_tokens(payload, len(choices))),
        )

    def _check_beams(
        self, settings: DecodingSettings, payloads: Sequence[dict[str, Any]], results: Sequence[Generation]
    ) -> None:
        """Fewer than W choices, or W identical ones with no other evidence: no beam search
        ran, and the cell fails with the reason (``harness.engines.beams``)."""
        reported = [_reported_width(p) for p in payloads]
        reason = self.beams.check(settings, [g.beams for g in results], reported)
        if reason is not None:
            raise ServerError(f"{self.shown}: {reason}", FailureKind.NO_BEAM_SEARCH)

    def _check_slots(self, payloads: Sequence[dict[str, Any]]) -> None:
        """Where a server says how it batched (``python -m harness serve`` does), the batch
        must be exactly the planned one: one engine batch, slot i at position i."""
        marks = [m for p in payloads if isinstance(m := p.get("harness_batch"), dict)]
        if not marks or len(marks) != len(payloads):
            return
        ids = [m.get("id") for m in marks]
        positions = [m.get("position") for m in marks]
        if len(set(ids)) != 1 or positions != list(range(len(payloads))):
            raise ServerError(
                f"{self.shown}: the server did not keep the planned batch (engine "
                f"batches {ids}, positions {positions} for slots 0..{len(payloads) - 1});"
                " give `python -m harness serve` a longer --batch-window-ms",
                FailureKind.SPLIT_BATCH,
            )


def _index(choice: dict[str, Any], default: int) -> int:
    index = choice.get("index", default)
    return index if isinstance(index, int) and not isinstance(index, bool) else default


def _completion_tokens(payload: dict[str, Any], choices: int) -> int | None:
    """Generated tokens per choice, from the answer's ``usage`` (None where it has none)."""
    usage = payload.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        return None
    return tokens // max(choices, 1)


def _reported_width(payload: dict[str, Any]) -> int | None:
    """The beam width a server says it ran the request at (``python -m harness serve``)."""
    mark = payload.get("harness_batch")
    width = mark.get("beam_width") if isinstance(mark, dict) else None
    return width if isinstance(width, int) and not isinstance(width, bool) else None
