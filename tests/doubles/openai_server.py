"""A test double of an OpenAI-compatible server that behaves as the real ones were seen to
behave (tests/servers/README.md), for tests of what the openai backend checks.

It answers each prompt with the prompt reversed (at most ``max_tokens`` words of it, and
counts 10 tokens per choice, or ``max_tokens`` when that is fewer, as a real server counts
no more than it was asked for) and gives ``n`` choices as configured: one
choice for any ``n`` (llama-cpp-python), ``n`` greedy copies (llama-server), or distinct beams
(a server that runs beam search); it serves one request at a time behind a lock
(llama-cpp-python) or all at once; it can trickle its answers byte by byte, crash (close the
connection unanswered, then stop listening) at the k-th completion, and it records what it
received.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.serving import started


class BehavingServer(ThreadingHTTPServer):
    """Test double (see the module docstring). ``beams``: "one" | "copies" | "distinct";
    ``serial``: one request at a time; ``seconds``: time per answer; ``trickle``: seconds
    between the bytes of each answer; ``crash_at``: the k-th completion (1-based) closes its
    connection unanswered and the server stops listening (later connections are refused);
    ``model``: the id in /v1/models; ``paths`` and ``bodies``: what it received."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(
        self,
        beams: str = "distinct",
        serial: bool = False,
        seconds: float = 0.0,
        trickle: float = 0.0,
        crash_at: int | None = None,
        model: str = "m",
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model = model
        self.beams, self.serial, self.seconds, self.trickle = beams, serial, seconds, trickle
        self.crash_at = crash_at
        self.crashed = False
        self.lock = threading.Lock()
        self.engine_lock = threading.Lock()
        self.paths: list[str] = []
        self.bodies: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def crash(self) -> None:
        """Stop listening at once (later connections are refused), then end serve_forever
        from a thread of its own (shutdown waits for it)."""
        self.crashed = True
        self.socket.close()
        threading.Thread(target=self.shutdown, daemon=True).start()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        limit = int(body.get("max_tokens", 10))
        text = " " + " ".join(body["prompt"][::-1].split(" ")[:limit])
        n = int(body.get("n", 1))
        texts = {
            "one": [text],
            "copies": [text] * n,
            "distinct": [text + ("" if k == 0 else f" beam{k}") for k in range(n)],
        }[self.beams]
        return {
            "choices": [{"index": k, "text": t} for k, t in enumerate(texts)],
            "usage": {"completion_tokens": min(10, limit) * len(texts)},
        }


class _Handler(BaseHTTPRequestHandler):
    server: BehavingServer

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.server.trickle:
            for i in range(len(data)):
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                time.sleep(self.server.trickle)
        else:
            self.wfile.write(data)

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.paths.append(self.path)
        self._send({"object": "list", "data": [{"id": self.server.model, "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.paths.append(self.path)
            self.server.bodies.append(body)
            crashed = self.server.crash_at is not None and len(self.server.bodies) >= self.server.crash_at
        if crashed:
            self.server.crash()
            self.close_connection = True
            self.connection.close()
            return
        if self.server.serial:
            with self.server.engine_lock:
                time.sleep(self.server.seconds)
        else:
            time.sleep(self.server.seconds)
        self._send(self.server.answer(body))


@pytest.fixture
def behaving() -> Iterator[Callable[..., BehavingServer]]:
    """start(**behaviour) -> a BehavingServer serving from a thread (stopped after the test)."""
    yield from started(BehavingServer)
