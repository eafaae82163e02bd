"""``python -m harness serve``: an engine behind an OpenAI-compatible API on loopback.

``/v1/models`` and ``/v1/completions`` (greedy, or beam search through the fields trtllm-serve
and vLLM take: ``harness.engines.completions.BEAM_SEARCH_FIELDS``), standard library only
(``http.server``). One engine thread does all the generating: it gathers requests with
identical decoding settings that arrive within the batch window (or until the maximum batch
size) into ONE ``engine.generate`` call, in arrival order, so a request's arrival slot is its
batch position. Arrival is the order connections are accepted. Each answer says where its
request went (``harness_batch``: engine batch id, size, position), which the openai backend
checks. Lets the openai backend be tested end to end against a real HTTP server.

- ``request``: what a /v1/completions body may ask (``parse_completion``), within the engine's
  build limits (``Bounds``);
- ``batcher``: the engine thread and the batches it gathers (``Batcher``);
- ``server``: the HTTP server, its handler, and ``serve`` (load, listen, stop).
"""

from __future__ import annotations

from harness.tools.serve.batcher import Batcher, Pending
from harness.tools.serve.request import BadRequest, Bounds, parse_completion
from harness.tools.serve.server import (
    CompletionHandler,
    CompletionServer,
    base_url,
    check_host,
    make_server,
    serve,
)

__all__ = [
    "BadRequest",
    "Batcher",
    "Bounds",
    "CompletionHandler",
    "CompletionServer",
    "Pending",
    "base_url",
    "check_host",
    "make_server",
    "parse_completion",
    "serve",
]
