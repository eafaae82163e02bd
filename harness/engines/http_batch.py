"""One batch of HTTP requests in flight at once, each timed, the whole of each bounded.

``send_batch`` connects and writes request i before request i+1 starts (so the arrival order
is the position order), reads every answer on a thread of its own from the moment its
request is written (so each answer's timing is its own, not the time the previous one took
to read), and gives each request ``timeout`` seconds from its send to the end of its answer.
``http.client``'s socket timeout bounds only each read: a server that trickles one byte a
second would never reach it. Here a request still unanswered at its deadline has its socket
shut down, which ends the blocked read at once, and is reported as timed out.

A server that crashes on request i refuses request i+1's connection, often before request i's
reader has seen its connection closed; so when a request cannot be sent, the earlier ones get
a moment (``EARLIER_GRACE_S``) to show a failure of their own, and the first failure in
position order is the one reported.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.config.parse import Json
from harness.engines.base import RequestTiming

Connect = Callable[[float], http.client.HTTPConnection]
EARLIER_GRACE_S = 2.0  # after a request cannot be sent: time for an earlier one to show its failure


@dataclass
class Answer:
    """One request's outcome: status and body, or the connection error; and when."""

    status: int | None = None
    body: bytes = b""
    error: BaseException | None = None
    timed_out: bool = False
    sent: float = 0.0  # seconds from the batch's start
    written: float | None = None
    first_byte: float | None = None
    finished: float | None = None

    def timing(self, tokens: int | None) -> RequestTiming | None:
        if self.written is None or self.first_byte is None or self.finished is None:
            return None
        return RequestTiming(
            sent=self.sent,
            written=self.written,
            first_byte=self.first_byte,
            finished=self.finished,
            tokens=tokens,
        )


def _encode(body: Mapping[str, Json]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _read(conn: http.client.HTTPConnection, answer: Answer, t0: float) -> None:
    """The reader thread: status line, headers, body; any failure kept for the caller."""
    try:
        response = conn.getresponse()
        answer.first_byte = time.monotonic() - t0
        answer.body = response.read()
        answer.status = response.status
        answer.finished = time.monotonic() - t0
    except (OSError, http.client.HTTPException, ValueError) as exc:
        answer.error = exc


def _shut(sock: socket.socket | None) -> None:
    """End any read blocked on ``sock`` (the connection may already have handed the socket to
    its response, so the caller keeps its own reference)."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _earlier_failed(readers: Sequence[threading.Thread], answers: Sequence[Answer]) -> bool:
    """After a request could not be sent: did an earlier one fail within the grace?"""
    end = time.monotonic() + EARLIER_GRACE_S
    for reader, answer in zip(readers, answers):
        reader.join(max(0.0, end - time.monotonic()))
        if answer.error is not None:
            return True
    return False


def send_batch(
    connect: Connect, path: str, bodies: Sequence[Mapping[str, Json]], headers: dict[str, str], timeout: float
) -> list[Answer]:
    """POST every body to ``path``, in order, all in flight at once; every answer within
    ``timeout`` seconds of its request's send. A failure to connect or write raises (the
    batch is incomplete), unless an earlier request failed first: then the answers so far come
    back, that failure marked in its ``Answer``; a failed or late answer is marked in its
    ``Answer``."""
    t0 = time.monotonic()
    conns: list[http.client.HTTPConnection] = []
    socks: list[socket.socket | None] = []
    answers: list[Answer] = []
    readers: list[threading.Thread] = []
    try:
        for body in bodies:
            answer = Answer(sent=time.monotonic() - t0)
            try:
                conn = connect(timeout)
                conns.append(conn)
                conn.request("POST", path, body=_encode(body), headers=headers)
            except (OSError, http.client.HTTPException):
                if _earlier_failed(readers, answers):
                    return answers  # the first failure, in position order
                raise
            socks.append(conn.sock)
            answer.written = time.monotonic() - t0
            reader = threading.Thread(
                target=_read, args=(conn, answer, t0), daemon=True, name="harness-http-read"
            )
            reader.start()
            answers.append(answer)
            readers.append(reader)
        for sock, answer, reader in zip(socks, answers, readers):
            reader.join(max(0.0, t0 + answer.sent + timeout - time.monotonic()))
            if reader.is_alive():
                answer.timed_out = True
                _shut(sock)
                reader.join(5.0)
    finally:
        for sock in socks + [c.sock for c in conns]:
            _shut(sock)  # a reader of a failed batch must not outlive it
        for conn in conns:
            conn.close()
    return answers
