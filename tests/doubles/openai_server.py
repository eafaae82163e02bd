"""A test double of an OpenAI-compatible server that behaves as the real ones were seen to
behave (tests/servers/README.md), for tests of what the openai backend checks.

It answers each prompt with the prompt reversed (at most ``max_tokens`` words of it, and
counts 10 tokens per choice, or ``max_tokens`` when that is fewer, as a real server counts
no more than it was asked for) and gives ``n`` choices as configured: one
choice for any ``n`` (llama-cpp-python), ``n`` greedy copies (llama-server), or distinct beams
(a server that runs beam search); it serves one request at a time behind a lock
(llama-cpp-python) or all at once; it can trickle its answers byte by byte, crash (close the
connection unanswered, then stop listening) at the k-th completion, add fields of a server's
own to each answer (llama-server's ``timings``, ``id_slot``), answer ``GET /props`` (llama-server's
``total_slots``), and it records what it received and how many requests it held at once.
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
    ``model``: the id in /v1/models; ``fields(body, k)``: fields added to the k-th answer
    (0-based); ``props``: the answer to GET /props (None: a 404); ``paths`` and ``bodies``: what
    it received; ``most``: the most completions it held at once."""

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
        fields: Callable[[dict[str, Any], int], dict[str, Any]] | None = None,
        props: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model = model
        self.beams, self.serial, self.seconds, self.trickle = beams, serial, seconds, trickle
        self.crash_at = crash_at
        self.crashed = False
        self.fields, self.props = fields, props
        self.holding = self.most = 0
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
        if self.path.split("?")[0] == "/props":
            if self.server.props is None:
                self.send_error(404)
            else:
                self._send(self.server.props)
            return
        self._send({"object": "list", "data": [{"id": self.server.model, "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.paths.append(self.path)
            self.server.bodies.append(body)
            k = len(self.server.bodies) - 1
            crashed = self.server.crash_at is not None and len(self.server.bodies) >= self.server.crash_at
            self.server.holding += not crashed
            self.server.most = max(self.server.most, self.server.holding)
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
        with self.server.lock:
            self.server.holding -= 1
        answer = self.server.answer(body)
        if self.server.fields is not None:
            answer.update(self.server.fields(body, k))
        self._send(answer)


@pytest.fixture
def behaving() -> Iterator[Callable[..., BehavingServer]]:
    """start(**behaviour) -> a BehavingServer serving from a thread (stopped after the test)."""
    yield from started(BehavingServer)
