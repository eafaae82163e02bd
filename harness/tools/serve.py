"""``python -m harness serve``: an engine behind an OpenAI-compatible API on loopback.

``/v1/models`` and ``/v1/completions`` (greedy, or beam search through ``use_beam_search``,
``n``, ``best_of``, ``length_penalty``, ``early_stopping``, as trtllm-serve and vLLM take them),
standard library only (``http.server``). One engine thread does all the generating: it gathers
requests with identical decoding settings that arrive within the batch window (or until the
maximum batch size) into ONE ``engine.generate`` call, in arrival order, so a request's arrival
slot is its batch position. Arrival is the order connections are accepted. Each answer says
where its request went (``harness_batch``: engine batch id, size, position), which the openai
backend checks. Lets the openai backend be tested end to end against a real HTTP server.
"""

from __future__ import annotations

import itertools
import json
import queue
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.config import DecodingSettings
from harness.engines.base import EngineBase, Generation, as_engine
from harness.errors import ConfigError, describe
from harness.model.limits import EngineLimits

DEFAULT_WINDOW_MS = 100.0
DEFAULT_MAX_BATCH = 8  # when the engine records no max_batch_size
DEFAULT_MAX_BEAMS = 8  # when the engine records no max_beam_width
DEFAULT_MAX_TOKENS = 4096  # when the engine records no max_seq_len
MAX_LENGTH_PENALTY = 10.0  # length ** penalty stays finite for any length an engine holds
READ_TIMEOUT_S = 60.0  # each read of a request: a client silent this long is dropped
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_BODY = 16 << 20
BEAM_FIELDS = ("use_beam_search", "n", "best_of", "length_penalty", "early_stopping")


class BadRequest(Exception):
    """A request the server cannot serve: answered 400 with the message."""


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
    batch: dict[str, int] | None = None  # {"id", "size", "position"} once generated


@dataclass(frozen=True)
class Bounds:
    """What one request may ask of the engine, from its build limits (defaults where it records
    none). A request beyond them is a 400 naming the bound; none can stall the engine thread.

    The beam width is bounded by the engine's KV slots in all (``max_batch_size`` x
    ``max_beam_width``), not by ``max_beam_width`` itself: serving an engine is how the harness
    tests it, and an engine that takes more beams than it was built for (the incident the
    harness exists to catch) must be served as it behaves; what a request may never do is ask
    for more sequences than the engine holds.
    """

    max_prompts: int = DEFAULT_MAX_BATCH  # prompts in one request (the server's batch size)
    max_beams: int = DEFAULT_MAX_BATCH * DEFAULT_MAX_BEAMS  # n / best_of of one request
    max_tokens: int = DEFAULT_MAX_TOKENS  # max_tokens of one request
    max_input_tokens: int | None = None  # checked by the engine thread where it can count
    max_seq_len: int | None = None

    def input_problem(self, tokens: int, max_tokens: int) -> str | None:
        """Why a prompt of ``tokens`` tokens cannot be served with ``max_tokens``, or None."""
        if tokens < 1:
            return "the prompt has no tokens: the engine needs at least one to continue from"
        if self.max_input_tokens is not None and tokens > self.max_input_tokens:
            return f"the prompt has {tokens} tokens; the engine's max_input_len is {self.max_input_tokens}"
        if self.max_seq_len is not None and tokens + max_tokens > self.max_seq_len:
            return (
                f"the prompt's {tokens} tokens + max_tokens {max_tokens} exceed the engine's "
                f"max_seq_len {self.max_seq_len}"
            )
        return None

    @classmethod
    def of(cls, limits: EngineLimits | None, max_batch_size: int) -> Bounds:
        if limits is None:  # an engine without build limits (an hf model, a user's class)
            return cls(
                max_prompts=max_batch_size,
                max_beams=max_batch_size * DEFAULT_MAX_BEAMS,
                max_tokens=DEFAULT_MAX_TOKENS,
                max_input_tokens=None,
                max_seq_len=None,
            )
        beams = limits.max_beam_width or DEFAULT_MAX_BEAMS
        return cls(
            max_prompts=max_batch_size,
            max_beams=(limits.max_batch_size or max_batch_size) * beams,
            max_tokens=limits.max_output_len or limits.max_seq_len or DEFAULT_MAX_TOKENS,
            max_input_tokens=limits.max_input_len,
            max_seq_len=limits.max_seq_len,
        )


def _integer(body: dict[str, Any], key: str, default: int | None, high: int, why: str) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{key} must be a positive integer, got {value!r}")
    if value > high:
        raise BadRequest(f"{key} {value} is more than {high} ({why})")
    return value


def _prompts(body: dict[str, Any], bounds: Bounds) -> list[str]:
    prompt = body.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise BadRequest("prompt must be a string or a non-empty list of strings")
    if len(prompts) > bounds.max_prompts:
        raise BadRequest(
            f"{len(prompts)} prompts in one request; at most {bounds.max_prompts} "
            "(the server's max batch size)"
        )
    if any(not p.strip() for p in prompts):
        raise BadRequest("prompt must not be empty: the engine needs at least one token to continue from")
    for i, p in enumerate(prompts):
        problem = _text_problem(p)
        if problem:
            where = "prompt" if isinstance(prompt, str) else f"prompt {i}"
            raise BadRequest(f"{where} {problem}")
    return prompts


def _text_problem(text: str) -> str | None:
    """Why ``text`` is not text an engine can encode, or None. JSON can carry what UTF-8
    cannot: a lone surrogate (an unpaired ``\\ud800`` escape), which every tokenizer refuses;
    found here, in the request's own thread, it never joins a batch with other clients'."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"is not valid text: a lone surrogate {ascii(text[exc.start])} at character "
            f"{exc.start} (a \\uD800-\\uDFFF escape must be one of a pair); send UTF-8 text"
        )
    return None


def _unsupported(body: dict[str, Any]) -> None:
    for key in ("stream", "echo"):
        if body.get(key) is True:
            raise BadRequest(f"{key} is not supported by this server")
    for key in ("suffix", "logprobs", "stop", "logit_bias"):
        if body.get(key):
            raise BadRequest(f"{key} is not supported by this server")
    temperature = body.get("temperature", 0)
    if temperature not in (0, 0.0, None) or isinstance(temperature, bool):
        raise BadRequest(
            f"temperature {temperature!r}: this server decodes greedily or with beam "
            "search only; send temperature 0"
        )


def _beam_settings(body: dict[str, Any], bounds: Bounds) -> tuple[int, int, float, bool]:
    """(beam width, choices per prompt, length penalty, early stopping)."""
    why = f"the engine's KV slots in all: max_batch_size x max_beam_width = {bounds.max_beams}"
    n = _integer(body, "n", 1, bounds.max_beams, why)
    best_of = _integer(body, "best_of", None, bounds.max_beams, why)
    assert n is not None
    beam_search = body.get("use_beam_search", False)
    if not isinstance(beam_search, bool):
        raise BadRequest("use_beam_search must be true or false")
    if beam_search:
        width = best_of or n  # trtllm-serve: best_of, else n; vLLM: n (clients send both equal)
        if n > width:
            raise BadRequest(f"n {n} is more than the beam width best_of {width}")
    elif n != 1 or best_of not in (None, 1):
        raise BadRequest("n or best_of above 1 needs use_beam_search true (greedy decoding gives one output)")
    else:
        width = 1
    penalty = body.get("length_penalty", 1.0)
    penalty = 1.0 if penalty is None else penalty
    if (
        isinstance(penalty, bool)
        or not isinstance(penalty, (int, float))
        or not -MAX_LENGTH_PENALTY <= penalty <= MAX_LENGTH_PENALTY
    ):
        raise BadRequest(
            f"length_penalty must be a number from -{MAX_LENGTH_PENALTY:g} to "
            f"{MAX_LENGTH_PENALTY:g}, got {penalty!r}"
        )
    early = body.get("early_stopping", True)
    early = True if early is None else early
    if not isinstance(early, bool):
        raise BadRequest(f"early_stopping must be true or false, got {early!r}")
    return width, n, float(penalty), early


def parse_completion(
    body: Any, model_name: str, bounds: Bounds = Bounds()
) -> tuple[list[str], DecodingSettings, int]:
    """(prompts, settings, choices per prompt) from a /v1/completions body; BadRequest if not
    servable or beyond ``bounds``. A prompt list is served as consecutive slots."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model")
    if model is not None and model != model_name:
        raise BadRequest(f"model {model!r} is not served here; GET /v1/models lists {model_name!r}")
    prompts = _prompts(body, bounds)
    _unsupported(body)
    max_tokens = _integer(
        body,
        "max_tokens",
        16,
        bounds.max_tokens,
        "the engine's max_seq_len" if bounds.max_seq_len else "this server's bound",
    )
    width, n, penalty, early = _beam_settings(body, bounds)
    assert max_tokens is not None
    settings = DecodingSettings(
        beam_width=width, max_new_tokens=max_tokens, length_penalty=penalty, early_stopping=early
    )
    return prompts, settings, n


class Batcher:
    """The one engine thread: same-settings requests within the window -> one generate call."""

    def __init__(
        self, engine: Any, *, max_batch_size: int, window_s: float, bounds: Bounds | None = None
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


class CompletionServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that numbers connections in accept order (the arrival order)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # a full batch connects at once; the default 5 would drop SYNs

    def __init__(
        self,
        address: tuple[str, int],
        engine: Any,
        *,
        model_name: str,
        max_batch_size: int,
        window_s: float,
        quiet: bool = True,
        bounds: Bounds | None = None,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, CompletionHandler)
        self.engine: EngineBase = as_engine(engine)
        self.model_name = model_name
        self.created = int(time.time())
        self.quiet = quiet
        self.bounds = bounds or Bounds(max_prompts=max_batch_size)
        self.batcher = Batcher(
            self.engine, max_batch_size=max_batch_size, window_s=window_s, bounds=self.bounds
        )
        self._arrivals = itertools.count()
        self._arrival_of: dict[Any, int] = {}
        self._lock = threading.Lock()
        self.batcher.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:  # runs in the accept loop, so the numbers follow accept order
            self._arrival_of[request] = next(self._arrivals)
        super().process_request(request, client_address)

    def arrival(self, request: Any) -> int:
        with self._lock:
            return self._arrival_of.pop(request, -1)

    def models(self) -> dict[str, Any]:
        info = self.engine.info
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "batch-position-harness",
                    "root": info.identity,
                    "backend": info.backend,
                    "max_batch_size": self.batcher.max_batch_size,
                    "batch_window_ms": self.batcher.window_s * 1000.0,
                }
            ],
        }

    def close(self) -> None:
        """Stop listening, finish the engine thread, close the engine."""
        self.server_close()
        self.batcher.stop()
        self.engine.close()


class CompletionHandler(BaseHTTPRequestHandler):
    """GET /v1/models, GET /health, POST /v1/completions; one request per connection."""

    server: CompletionServer
    server_version = "batch-position-harness-serve"
    timeout = READ_TIMEOUT_S  # per read (socket timeout): a silent client is dropped

    def setup(self) -> None:
        super().setup()
        self.arrival = self.server.arrival(self.request)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        if not self.server.quiet:
            super().log_message(format, *args)

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        """Send one answer. Encoded here, for this request alone, before anything is sent:
        an output with a lone surrogate goes with "?" in its place, as the harness scores it
        (stages/generate.output_text); one JSON cannot hold is this request's 500."""
        try:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8", "replace")
        except (TypeError, ValueError) as exc:
            status, data = (
                500,
                json.dumps(
                    {
                        "error": {
                            "message": f"the answer cannot be sent as JSON ({describe(exc)})",
                            "type": "server_error",
                            "code": 500,
                        }
                    }
                ).encode("ascii"),
            )
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        kind = "invalid_request_error" if status < 500 else "server_error"
        self._json(status, {"error": {"message": message, "type": kind, "code": status}})

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = urlsplit(self.path).path.rstrip("/")
        if path == "/v1/models":
            self._json(200, self.server.models())
        elif path == "/health":
            self._json(200, {"status": "ok"})
        else:
            self._error(404, f"no such endpoint {path or '/'}; try /v1/models or /v1/completions")

    def do_POST(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path.rstrip("/")
        if path != "/v1/completions":
            self._error(404, f"no such endpoint {path or '/'}; POST /v1/completions")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(411, "a Content-Length header is required")
            return
        if not 0 <= length <= MAX_BODY:
            self._error(413, f"the body must be at most {MAX_BODY} bytes")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except ValueError as exc:
            self._error(400, f"the body is not JSON ({exc})")
            return
        except RecursionError:
            self._error(400, "the body nests too deeply to be a completions request")
            return
        try:
            prompts, settings, n = parse_completion(body, self.server.model_name, self.server.bounds)
        except BadRequest as exc:
            self._error(400, str(exc))
            return
        self._complete(prompts, settings, n)

    def _complete(self, prompts: list[str], settings: DecodingSettings, n: int) -> None:
        """Hand the prompts to the engine thread, wait, answer."""
        items = [
            Pending(arrival=(self.arrival, i), prompt=p, settings=settings) for i, p in enumerate(prompts)
        ]
        self.server.batcher.submit(items)
        for item in items:
            item.done.wait()
        failed = next((item for item in items if item.error is not None), None)
        if failed is not None:
            self._error(failed.status, failed.error or "")
            return
        choices, completion_tokens = [], 0
        for i, item in enumerate(items):
            assert item.result is not None
            beams = (item.result.text, *item.result.beams[1:])  # choice 0: the text scored
            finish = "length" if len(item.result.token_ids) >= settings.max_new_tokens else "stop"
            for j, text in enumerate(beams[:n]):
                choices.append({"index": i * n + j, "text": text, "logprobs": None, "finish_reason": finish})
            completion_tokens += len(item.result.token_ids)
        self._json(
            200,
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.server.model_name,
                "choices": choices,
                "usage": {"completion_tokens": completion_tokens},
                # not part of the OpenAI API: where each prompt went (clients ignore extra fields)
                "harness_batch": items[0].batch if len(items) == 1 else None,
                "harness_batches": [item.batch for item in items],
            },
        )


def check_host(host: str) -> str:
    """Loopback only: the server has no authentication."""
    if host not in LOOPBACK and not host.startswith("127."):
        raise ConfigError(
            f"--host {host}: serve listens on loopback only (127.0.0.1, ::1, "
            "localhost); it has no authentication"
        )
    return host


def make_server(
    engine: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    model_name: str,
    max_batch_size: int,
    window_ms: float = DEFAULT_WINDOW_MS,
    quiet: bool = True,
    bounds: Bounds | None = None,
) -> CompletionServer:
    """A listening server around a loaded engine (port 0: any free port); requests bounded by
    ``bounds`` (default: the engine's build limits, as ``serve`` reads them)."""
    check_host(host)
    if bounds is None:
        bounds = Bounds.of(as_engine(engine).limits, max_batch_size)
    try:
        return CompletionServer(
            (host, port),
            engine,
            model_name=model_name,
            max_batch_size=max_batch_size,
            window_s=window_ms / 1000.0,
            quiet=quiet,
            bounds=bounds,
        )
    except OSError as exc:
        raise ConfigError(
            f"--port {port}: cannot listen on {host}:{port} "
            f"({exc.strerror or exc}); pick another port, or 0 for any free one"
        ) from None


def base_url(server: CompletionServer) -> str:
    address = server.server_address
    host, port = str(address[0]), address[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


def serve(
    spec: str,
    *,
    backend: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    max_batch_size: int | None = None,
    window_ms: float = DEFAULT_WINDOW_MS,
    model_name: str | None = None,
    quiet: bool = True,
) -> int:
    """Load the engine, print the ready line, serve until Ctrl-C (or SIGTERM)."""
    from harness.engines.registry import load_engine

    check_host(host)
    engine = load_engine(spec, backend)
    limits = engine.limits
    size = (
        max_batch_size
        or (limits.max_batch_size if limits and limits.max_batch_size else None)
        or DEFAULT_MAX_BATCH
    )
    name = model_name or Path(engine.info.path).name or engine.info.backend
    try:
        server = make_server(
            engine,
            host=host,
            port=port,
            model_name=name,
            max_batch_size=size,
            window_ms=window_ms,
            quiet=quiet,
            bounds=Bounds.of(limits, size),
        )
    except ConfigError:
        engine.close()
        raise

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Ctrl-C and SIGTERM both end serve_forever (SIGINT explicitly: a background job may have
    # inherited it ignored)
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    print(
        f"serving {spec} at {base_url(server)} (model {name!r}, {engine.info.backend}, "
        f"max batch {size}, window {window_ms:g} ms)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.close()
        print(f"stopped after {server.batcher.batches} engine batches", file=sys.stderr, flush=True)
    return 0
