"""HTTP servers the tests run in this process (test doubles of a server, and ``python -m harness
serve``'s CompletionServer), each serving from a thread of its own, and a client's POST to
one of them."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from socketserver import BaseServer, TCPServer
from typing import Any, ParamSpec, TypeVar

from harness.tools.serve import CompletionServer

P = ParamSpec("P")
S = TypeVar("S", bound=BaseServer)


def in_thread(server: S) -> S:
    """``server``, serving from a daemon thread of its own."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server: BaseServer) -> None:
    """End ``server``'s serve_forever and close it (a CompletionServer: its engine too)."""
    server.shutdown()
    if isinstance(server, CompletionServer):
        server.close()
    else:
        server.server_close()


@contextmanager
def serving(server: S) -> Iterator[S]:
    """``server`` serving from a thread of its own while the block runs, stopped after."""
    in_thread(server)
    try:
        yield server
    finally:
        stop(server)


def started(make: Callable[P, S]) -> Iterator[Callable[P, S]]:
    """A fixture's body: start(...) makes a server with ``make`` and serves it from a thread
    of its own; every server started is stopped after the test."""
    servers: list[S] = []

    def start(*args: P.args, **kwargs: P.kwargs) -> S:
        servers.append(in_thread(make(*args, **kwargs)))
        return servers[-1]

    yield start
    for server in servers:
        stop(server)


def post(server: TCPServer, data: bytes, timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    """``data`` POSTed to ``server``'s /v1/completions on a connection of its own: the status
    and the JSON body of the answer."""
    host, port = server.server_address[:2]
    assert isinstance(host, str)  # an IPv4 address
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(
            "POST",
            "/v1/completions",
            body=data,
            headers={"Content-Length": str(len(data)), "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()
