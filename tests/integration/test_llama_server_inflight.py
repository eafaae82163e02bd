"""The openai backend's in-flight path against a real llama-server (tests/servers/), driven as
the schedules drive it (``harness.stages.arrivals.drive``): what its ``/v1/completions`` answers
say of slots and cached prompt tokens, and its greedy text against the bulk path's.

Skips unless llama-server is built (``python -m tests.servers.llama_cpp build``; CI builds it and
sets HARNESS_REQUIRE_LLAMA_CPP, which turns the skip into a failure).
"""

from __future__ import annotations

import os

import pytest

from harness.config import DecodingSettings
from harness.engines.openai import OpenAIEngine
from harness.engines.openai_inflight import OpenAIInFlight
from harness.stages.arrivals import drive
from tests.servers import llama_cpp
from tests.servers.verify_tokenizer import bundled_prompts

REQUIRE = "HARNESS_REQUIRE_LLAMA_CPP"
SLOTS = 4
GREEDY = DecodingSettings(beam_width=1, max_new_tokens=32)


@pytest.mark.slow  # a real server (CI builds it)
def test_eight_staggered_requests_through_llama_server_say_their_cached_tokens_not_their_slot() -> None:
    if (reason := llama_cpp.available("llama-server")) is not None:
        if os.environ.get(REQUIRE):
            pytest.fail(f"{REQUIRE} is set but {reason}")
        pytest.skip(reason)
    prompts = [text for _, text in bundled_prompts()[:8]]
    with llama_cpp.start("llama-server", llama_cpp.convert(), parallel=SLOTS, alias="bundled") as server:
        engine = OpenAIEngine(server.base_url, retries=0)
        path = engine.in_flight(GREEDY)
        assert isinstance(path, OpenAIInFlight)
        try:
            # staggered: one first, then the rest at its own time over the slots apart
            staggered = drive(path, prompts, first_wave=1, cap=SLOTS, gap=None, timeout=120)
            # then all of them again, SLOTS at once (refill): each served from the cache
            warm = drive(path, prompts, first_wave=SLOTS, cap=SLOTS, gap=0.0, timeout=120)
        finally:
            engine.close()
        alone = [engine.generate([p], GREEDY)[0].text for p in prompts]  # after: a cold first pass
    assert path.running == 0
    assert path.slots == SLOTS  # GET /props: total_slots, the --parallel it was started with
    sent = staggered + warm
    answers = [s.generation for s in sent]
    record = [(s.rank, s.in_flight, a and a.slot, a and a.cached_tokens) for s, a in zip(sent, answers)]
    print("rank, in flight at send, slot, cached tokens:", record)
    for a in answers:
        assert a is not None and a.timing is not None
        # llama-server 0.3.36's /v1/completions answers name no slot (id_slot is in the native
        # /completion answer, and in /v1's only under __verbose), but say their reused tokens
        assert a.slot is None and isinstance(a.cached_tokens, int)
    assert "timings.cache_n and usage.prompt_tokens_details.cached_tokens" in path.cache
    cold = {s.index: s.generation.cached_tokens for s in staggered if s.generation is not None}
    for s in warm:  # the warm pass: served from the cache, more of each prompt than cold
        assert s.generation is not None and (s.generation.cached_tokens or 0) > (cold[s.index] or 0)
    assert max(s.in_flight for s in warm) > 0  # the refill wave overlapped on the server
    for drove in (staggered, warm):  # the bulk path's batch-size-1 text, request by request
        texts = {s.index: s.generation.text for s in drove if s.generation is not None}
        assert [texts.get(i) for i in range(8)] == alone
