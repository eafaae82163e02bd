"""`python -m harness serve` bounds every request to what the engine can take (issue 15, item
9): a request beyond them is a 400 with the reason, never a stall, a dropped connection or a
500, and the requests after it are served as before."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Sequence

import pytest

from harness.config import DecodingSettings
from harness.engines.base import EngineInfo, Generation
from harness.model.limits import EngineLimits
from harness.model.vocab import Layout
from harness.tools.serve import BadRequest, Bounds, CompletionServer, make_server, parse_completion
from tests.serving import post, serving

LIMITS = EngineLimits(
    layout=Layout.EMULATOR, max_batch_size=8, max_beam_width=2, max_input_len=6, max_seq_len=20
)
BOUNDS = Bounds.of(LIMITS, 8)


class CountingEngine:
    """Test double of an engine (generate + count_tokens, one token per word): records every
    batch it is given; the emulator's own limits checks raise where this one answers."""

    def __init__(self) -> None:
        self.info = EngineInfo(backend="counting-double", path="double", identity="double:1")
        self.calls: list[list[str]] = []

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        return [len(p.split()) for p in prompts]

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        self.calls.append(list(prompts))
        return [
            Generation(
                text=p.upper(), token_ids=(1,), beams=tuple(f"{p}#{b}" for b in range(settings.beam_width))
            )
            for p in prompts
        ]


@pytest.mark.parametrize(
    "body, message",
    [
        (
            {"prompt": "x", "use_beam_search": True, "n": 100000, "best_of": 100000},
            "n 100000 is more than 16 (the engine's KV slots in all: max_batch_size x max_beam_width = 16)",
        ),
        ({"prompt": "x", "use_beam_search": True, "best_of": 17}, "best_of 17 is more than 16"),
        ({"prompt": ""}, "prompt must not be empty"),
        ({"prompt": ["a", "  "]}, "prompt must not be empty"),
        ({"prompt": ["a"] * 9}, "9 prompts in one request; at most 8"),
        (
            {"prompt": "x", "use_beam_search": True, "n": 2, "length_penalty": 1e308},
            "length_penalty must be a number from -10 to 10, got 1e+308",
        ),
        ({"prompt": "x", "length_penalty": float("nan")}, "length_penalty must be a number"),
        ({"prompt": "x", "max_tokens": 21}, "max_tokens 21 is more than 20 (the engine's max_seq_len)"),
    ],
)
def test_requests_beyond_the_engine_limits_are_refused_with_the_bound(
    body: dict[str, object], message: str
) -> None:
    with pytest.raises(BadRequest, match="^" + re.escape(message)):
        parse_completion(body, "double", BOUNDS)


def test_bounds_come_from_the_build_limits_with_defaults_where_none_are_recorded() -> None:
    assert Bounds.of(LIMITS, 4) == Bounds(
        max_prompts=4, max_beams=16, max_tokens=20, max_input_tokens=6, max_seq_len=20
    )
    assert Bounds.of(None, 8) == Bounds(max_prompts=8, max_beams=64, max_tokens=4096)
    # the incident engine (beam width 1 built, 4 asked): served as it behaves, within its slots
    _, settings, _ = parse_completion(
        {"prompt": "x", "use_beam_search": True, "n": 4},
        "double",
        Bounds.of(EngineLimits(layout=Layout.EMULATOR, max_batch_size=8, max_beam_width=1), 8),
    )
    assert settings.beam_width == 4


@pytest.fixture
def server() -> Iterator[tuple[CompletionServer, CountingEngine]]:
    engine = CountingEngine()
    with serving(
        make_server(engine, model_name="double", max_batch_size=8, window_ms=20, bounds=BOUNDS)
    ) as srv:
        yield srv, engine


def test_hostile_requests_are_400s_and_the_server_keeps_serving(
    server: tuple[CompletionServer, CountingEngine],
) -> None:
    srv, engine = server
    hostile = [
        b"[" * 100_000 + b"]" * 100_000,
        json.dumps({"prompt": "a b", "use_beam_search": True, "n": 100000}).encode(),
        json.dumps({"prompt": ""}).encode(),
        json.dumps({"prompt": "a", "use_beam_search": True, "n": 2, "length_penalty": 1e308}).encode(),
        json.dumps({"prompt": "one two three four five six seven"}).encode(),
        json.dumps({"prompt": "one two", "max_tokens": 19}).encode(),
    ]
    reasons: list[str] = []
    for data in hostile:
        start = time.monotonic()
        status, body = post(srv, data)
        assert status == 400 and time.monotonic() - start < 5, body
        reasons.append(body["error"]["message"])
    assert reasons[0] == "the body nests too deeply to be a completions request"
    assert reasons[4] == "the prompt has 7 tokens; the engine's max_input_len is 6"
    assert reasons[5] == "the prompt's 2 tokens + max_tokens 19 exceed the engine's max_seq_len 20"
    assert engine.calls == []  # none reached the engine
    status, body = post(srv, json.dumps({"prompt": "a b", "max_tokens": 4}).encode())
    assert status == 200 and body["choices"][0]["text"] == "A B"
