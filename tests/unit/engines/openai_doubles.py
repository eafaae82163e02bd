"""The test doubles of test_openai.py: ``ScriptedServer`` (an OpenAI-compatible server that
answers from a script, to make 503s, 400s and slow answers) and ``RecordingEngine`` (an engine
that records each generate call, behind `python -m harness serve`'s server)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness.config import DecodingSettings
from harness.engines.base import EngineInfo, Generation


class ScriptedServer(ThreadingHTTPServer):
    """Test double of an OpenAI-compatible server: GET /v1/models lists "m"; the k-th
    POST connection accepted takes the k-th (status, delay) of the script (the last one
    repeats) and answers a POST to /v1/completions with the prompt reversed, or an error body in vLLM's
    format. ``posts`` holds the request bodies in accept order."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, *script: tuple[int, float]) -> None:
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.script = list(script)
        self.received: dict[int, dict[str, Any]] = {}
        self.accepted: dict[socket.socket | tuple[bytes, socket.socket], int] = {}
        self.gets = 0
        self.lock = threading.Lock()

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        with self.lock:  # the accept loop: numbers follow accept order
            self.accepted[request] = len(self.accepted)
        super().process_request(request, client_address)

    @property
    def posts(self) -> list[dict[str, Any]]:
        with self.lock:
            return [self.received[k] for k in sorted(self.received)]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _ScriptedHandler(BaseHTTPRequestHandler):
    server: ScriptedServer

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.gets += 1
        self._send(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            n = self.server.accepted[self.request] - self.server.gets  # GETs come first, at load
            self.server.received[n] = body
            status, delay = self.server.script[min(n, len(self.server.script) - 1)]
        time.sleep(delay)
        if status != 200:
            self._send(status, {"object": "error", "message": f"scripted {status}", "code": status})
        else:
            self._send(200, {"choices": [{"index": 0, "text": " " + body["prompt"][::-1]}]})


class RecordingEngine:
    """Test double of an engine (the Engine protocol: generate(prompts, settings) -> one
    Generation per prompt, in order): records every call, answers each prompt upper-cased,
    raises for a prompt that says "boom"."""

    def __init__(self) -> None:
        self.info = EngineInfo(backend="recording-double", path="double", identity="double:1")
        self.calls: list[tuple[list[str], DecodingSettings]] = []

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        assert isinstance(settings, DecodingSettings)
        self.calls.append((list(prompts), settings))
        if any("boom" in p for p in prompts):
            raise RuntimeError("the engine broke on purpose\nsecond line")
        return [
            Generation(
                text=p.upper(),
                token_ids=(1, 2),
                beams=tuple(f"{p.upper()}#{b}" for b in range(settings.beam_width)),
            )
            for p in prompts
        ]
