"""The serve command's HTTP side: a ``ThreadingHTTPServer`` that numbers connections in accept
order (the arrival order the batcher keeps), the handler of ``/v1/models``, ``/health`` and
``/v1/completions``, and ``serve`` itself: load the engine, listen on loopback, stop on Ctrl-C.
"""

from __future__ import annotations

import itertools
import json
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

from harness.config import DecodingSettings
from harness.engines.base import EngineBase, Generates, as_engine
from harness.errors import ConfigError, describe
from harness.tools.serve.batcher import Batcher, Pending
from harness.tools.serve.request import DEFAULT_MAX_BATCH, BadRequest, Bounds, parse_completion

DEFAULT_WINDOW_MS = 100.0
READ_TIMEOUT_S = 60.0  # each read of a request: a client silent this long is dropped
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_BODY = 16 << 20
Request = socket.socket | tuple[bytes, socket.socket]  # what socketserver hands a server per request


class CompletionServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that numbers connections in accept order (the arrival order)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # a full batch connects at once; the default 5 would drop SYNs

    def __init__(
        self,
        address: tuple[str, int],
        engine: EngineBase | Generates,
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
        self._arrival_of: dict[Request, int] = {}
        self._lock = threading.Lock()
        self.batcher.start()

    def process_request(self, request: Request, client_address: object) -> None:
        with self._lock:  # runs in the accept loop, so the numbers follow accept order
            self._arrival_of[request] = next(self._arrivals)
        super().process_request(request, client_address)

    def arrival(self, request: Request) -> int:
        with self._lock:
            return self._arrival_of.pop(request, -1)

    def models(self) -> dict[str, object]:
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

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the stdlib's name)
        if not self.server.quiet:
            super().log_message(format, *args)

    def _json(self, status: int, payload: Mapping[str, object]) -> None:
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
    engine: EngineBase | Generates,
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

    def interrupt(signum: int, frame: FrameType | None) -> None:
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
