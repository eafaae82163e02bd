"""The openai backend's in-flight path (harness.engines.openai_inflight), over real HTTP on
loopback against the test doubles of a server (``BehavingServer``, ``ScriptedServer``): requests
sent one by one overlap on the server, answers say their cached prompt tokens and slot where the
server gives them, errors are the bulk path's, and close() leaves no thread behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness.config import DecodingSettings
from harness.engines.base import Generation, InFlight
from harness.engines.completions import ServerError
from harness.engines.openai import OpenAIEngine
from harness.engines.openai_inflight import NOT_SAID, WORKER, OpenAIInFlight
from tests.doubles.openai_server import BehavingServer
from tests.serving import started
from tests.unit.engines.openai_doubles import ScriptedServer

GREEDY = DecodingSettings(beam_width=1, max_new_tokens=8)
BEAM2 = DecodingSettings(beam_width=2, max_new_tokens=8, length_penalty=0.5)


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedServer]]:
    """start(*script) -> a ScriptedServer serving from a thread (stopped after the test)."""
    yield from started(ScriptedServer)


def _open(url: str, settings: DecodingSettings = GREEDY, **options: Any) -> OpenAIInFlight:
    path = OpenAIEngine(url, backoff=0.01, **options).in_flight(settings)
    assert isinstance(path, OpenAIInFlight)
    return path


def _answer(path: InFlight, prompt: str = "a b") -> Generation:
    answer = path.submit(prompt).result()
    assert isinstance(answer, Generation)
    return answer


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == WORKER]


def test_requests_overlap_and_answer_as_the_bulk_path_does(behaving: Callable[..., BehavingServer]) -> None:
    server = behaving(seconds=0.1, beams="one")
    path = _open(server.url)
    prompts = ["a b", "c d", "e f", "g h"]
    pending = [path.submit(p) for p in prompts]  # all sent before any answer is back
    answers = [p.result() for p in pending]
    path.close()
    assert server.most == 4  # the server held every request at once
    assert [a.text for a in answers if isinstance(a, Generation)] == ["b a", "d c", "f e", "h g"]
    bulk = OpenAIEngine(server.url)
    bodies = sorted(server.bodies, key=lambda b: str(b["prompt"]))  # each read by a thread of its own
    assert bodies == [bulk.body(p, GREEDY) for p in prompts]  # the bulk path's request
    assert server.paths.count("/props") == 1  # asked once, at opening
    for a in answers:
        assert isinstance(a, Generation) and a.timing is not None
        assert 0 <= a.timing.sent <= a.timing.written <= a.timing.first_byte <= a.timing.finished
        assert a.timing.finished - a.timing.sent >= 0.1 and a.timing.tokens == 8
        assert a.slot is None and a.cached_tokens is None  # the double does not say
    assert path.cache == NOT_SAID and path.slots is None  # GET /props: a 404


def test_requests_sent_back_to_back_reach_the_server_in_submit_order(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted((200, 0.05))
    path = _open(server.url)
    prompts = [f"p{k}" for k in range(8)]
    pending = [path.submit(p) for p in prompts]
    assert [getattr(p.result(), "text", None) for p in pending] == [p[::-1] for p in prompts]
    path.close()
    assert [p["prompt"] for p in server.posts] == prompts  # in the order the server accepted them


def _timings(cache_n: int) -> dict[str, Any]:
    """What llama-server adds to a /v1/completions answer (recorded: tests/data/servers)."""
    return {
        "timings": {"cache_n": cache_n, "prompt_n": 1, "prompt_ms": 1.2},
        "usage": {"completion_tokens": 8, "prompt_tokens_details": {"cached_tokens": cache_n}},
        "tokens_cached": 99,  # what the slot holds after the request: never read
    }


@pytest.mark.parametrize(
    ("fields", "cached", "said"),
    [
        (_timings(7), 7, "(timings.cache_n and usage.prompt_tokens_details.cached_tokens)"),
        ({"timings": {"cache_n": 5}}, 5, "(timings.cache_n)"),
        (
            {"usage": {"completion_tokens": 8, "prompt_tokens_details": {"cached_tokens": 6}}},
            6,
            "(usage.prompt_tokens_details.cached_tokens)",
        ),
        ({"tokens_cached": 99, "timings": {"prompt_n": 3}}, None, None),
        (
            {"timings": {"cache_n": -1}, "usage": {"prompt_tokens_details": {"cached_tokens": True}}},
            None,
            None,
        ),
    ],
)
def test_cached_tokens_are_what_the_answer_says_it_reused(
    behaving: Callable[..., BehavingServer], fields: dict[str, Any], cached: int | None, said: str | None
) -> None:
    path = _open(behaving(beams="one", fields=lambda body, k: fields).url)
    assert path.cache == NOT_SAID  # nothing said before an answer
    assert _answer(path).cached_tokens == cached
    path.close()
    if said is None:
        assert path.cache == NOT_SAID
    else:
        assert (
            path.cache.startswith("the server says in each answer how many prompt tokens")
            and said in path.cache
        )


@pytest.mark.parametrize(
    ("fields", "slot"),
    [
        ({"id_slot": 3}, 3),  # a native answer's place
        ({"__verbose": {"id_slot": 1, "tokens_cached": 40}}, 1),  # /v1/completions, verbose server
        ({"id_slot": -1}, None),
        ({}, None),
    ],
)
def test_slot_is_the_id_slot_the_answer_names(
    behaving: Callable[..., BehavingServer], fields: dict[str, Any], slot: int | None
) -> None:
    path = _open(behaving(beams="one", fields=lambda body, k: fields).url)
    answer = _answer(path)
    path.close()
    assert answer.slot == slot and answer.cached_tokens is None


@pytest.mark.parametrize(
    ("props", "slots"), [({"total_slots": 4}, 4), ({"total_slots": "4"}, None), ({"other": 1}, None)]
)
def test_slots_from_llama_servers_props(
    behaving: Callable[..., BehavingServer], props: dict[str, Any], slots: int | None
) -> None:
    server = behaving(beams="one", props=props)
    path = _open(server.url)
    path.close()
    assert path.slots == slots and "/props" in server.paths  # at the root, not under /v1


def test_a_refusal_raises_from_result_with_the_bulk_paths_text(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted((400, 0))
    path = _open(server.url, retries=3)
    pending = path.submit("ab")
    with pytest.raises(ServerError, match="HTTP 400 at position 0: scripted 400"):
        pending.result()
    path.close()
    assert len(server.posts) == 1  # never retried, as in bulk


def test_a_5xx_is_retried_then_given_up_with_the_bulk_paths_text(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted((503, 0), (200, 0), (503, 0))  # the last step repeats
    path = _open(server.url, retries=1)
    assert _answer(path, "ab").text == "ba"  # sent again after the 503
    with pytest.raises(
        ServerError, match=r"a batch of 1 failed 2 time\(s\) \(--retries 1\); last: HTTP 503 at position 0"
    ):
        path.submit("cd").result()
    path.close()
    assert [p["prompt"] for p in server.posts] == ["ab", "ab", "cd", "cd"]


def test_a_late_answer_times_out_as_in_bulk(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted((200, 2.0))
    path = _open(server.url, request_timeout=0.3, retries=2)
    with pytest.raises(ServerError, match=r"no complete answer within 0.3 s of the request"):
        path.submit("ab").result()
    path.close()
    assert len(server.posts) == 1


def test_close_abandons_unanswered_requests_and_leaves_no_thread(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted((200, 5.0))
    engine = OpenAIEngine(server.url, retries=2, backoff=0.01)
    path = engine.in_flight(GREEDY)
    assert isinstance(path, OpenAIInFlight)
    pending = [path.submit(p) for p in ("ab", "cd")]
    while len(server.posts) < 2:  # both on the server
        time.sleep(0.01)
    t = time.monotonic()
    engine.close()  # closes the paths it opened
    assert time.monotonic() - t < 2.0 and not _workers() and path.running == 0
    for p in pending:
        with pytest.raises(ServerError, match="the in-flight path was closed before this request's answer"):
            p.result()
    assert len(server.posts) == 2  # no retry once closed
    with pytest.raises(RuntimeError, match="closed"):
        path.submit("ef")
    path.close()  # again: nothing


def test_answered_requests_leave_no_thread_after_close(behaving: Callable[..., BehavingServer]) -> None:
    path = _open(behaving(beams="one").url)
    answers = [path.submit(p) for p in ("a b", "c d")]
    assert all(isinstance(a.result(), Generation) for a in answers)
    path.close()
    assert not _workers()


def test_beam_fields_sent_and_each_answer_checked_as_in_bulk(behaving: Callable[..., BehavingServer]) -> None:
    server = behaving(beams="distinct")
    path = _open(server.url, BEAM2)
    answer = _answer(path)
    assert answer.beams == ("b a", "b a beam1") and answer.text == "b a"
    assert server.bodies[0]["best_of"] == 2 and server.bodies[0]["use_beam_search"] is True
    path.close()

    none = _open(behaving(beams="one").url, BEAM2)
    with pytest.raises(ServerError, match="returned 1 choice for best_of 2 .*no beam search ran"):
        none.submit("a b").result()
    none.close()
