"""A real server's recorded answers, served again: a test double that replays one recorded
harness run (``tests/data/servers/<kind>/harness-*.json``, written by ``record.py``).

It answers ``GET /v1/models`` as the server did (``server.json``) and each ``POST
/v1/completions`` with the answer recorded for the same body, the recorded occurrences of a
body in order (a body not recorded is a 404 saying to re-record). Each answer leaves when it
left in the recording, relative to its batch: the first request of a recorded batch to arrive
fixes the batch's start (its arrival minus its recorded write time), and every answer of the
batch is sent at start + its recorded finish time, so a server that answered one request at a
time, or all together, is replayed as it was. A request the server never answered (it died:
in ``harness-crash`` the recorder killed it at that request) closes its connection unanswered,
reset (RST) where the recording saw a reset and closed otherwise, and the replay stops
listening, so later connections are refused, as they were.

    with ReplayServer.start("llama-cpp-python", "harness-grid") as replay:
        replay.url      # http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.servers import recordings
from tests.serving import in_thread


class ReplayServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, kind: str, run: str, root: Path = recordings.DATA) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.kind, self.run = kind, run
        self.recording = recordings.load(kind, run, root)
        self.models = recordings.load(kind, "server", root)["models"]["response"]
        self.queue: dict[str, deque[tuple[int, dict[str, Any]]]] = {}
        for b, batch in enumerate(self.recording["batches"]):
            for r in batch["requests"]:
                self.queue.setdefault(recordings.key(r["body"]), deque()).append((b, r))
        self.starts: dict[int, float] = {}
        self.lock = threading.Lock()
        self.received: list[dict[str, Any]] = []
        self.crashed = False

    @classmethod
    def start(cls, kind: str, run: str, root: Path = recordings.DATA) -> ReplayServer:
        return in_thread(cls(kind, run, root))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def take(self, body: dict[str, Any]) -> tuple[float, dict[str, Any]] | None:
        """The recorded answer for ``body`` and when to send it (monotonic clock)."""
        now = time.monotonic()
        with self.lock:
            self.received.append(body)
            found = self.queue.get(recordings.key(body))
            if not found:
                return None
            batch, rec = found.popleft()
            start = self.starts.setdefault(batch, now - float(rec["t_written"] or 0.0))
        return start + float(rec["t_finish"] or 0.0), rec

    def crash(self) -> None:
        """Stop listening at once (later connections are refused), then end serve_forever
        from a thread of its own (shutdown waits for it). Closing alone is not enough:
        serve_forever's poll holds the listening socket open until it wakes (up to half a
        second), and a retry connecting meanwhile would be queued, then reset; shutting the
        socket down ends the listening at once."""
        self.crashed = True
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.socket.close()
        threading.Thread(target=self.shutdown, daemon=True).start()

    def __enter__(self) -> ReplayServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.crashed:
            self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: ReplayServer

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._send(200, self.server.models)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        found = self.server.take(body)
        if found is None:
            self._send(
                404,
                {
                    "error": {
                        "message": f"replay of {self.server.kind} "
                        f"{self.server.run}: this request was not "
                        "recorded; re-record with python -m "
                        "tests.servers.record"
                    }
                },
            )
            return
        at, rec = found
        time.sleep(max(0.0, at - time.monotonic()))
        if rec["status"] is None:  # the server died on this request
            self.server.crash()
            self.close_connection = True
            if rec.get("error") == "ConnectionResetError":  # close with a reset, as the kernel did
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            return
        self._send(int(rec["status"]), rec["response"])
