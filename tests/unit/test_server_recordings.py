"""The recorded answers of real servers (tests/data/servers/) are complete and tell what the
servers really do (see tests/servers/README.md)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.servers import recordings
from tests.servers.replay import ReplayServer
from tests.servers.verify_tokenizer import bundled_prompts

KINDS = ("llama-server", "llama-cpp-python")


@pytest.mark.parametrize("kind", KINDS)
def test_every_request_set_has_its_64_prompts_timed_and_answered(kind: str) -> None:
    prompts = dict(bundled_prompts())
    assert recordings.prompts() == prompts
    for name, conc in [("greedy-c1", 1), ("greedy-c4", 4), ("greedy-rp1-c1", 1), ("greedy-rp1-c4", 4)]:
        data = recordings.load(kind, name)
        reqs = [r for b in data["batches"] for r in b["requests"]]
        assert len(reqs) == 64 and all(len(b["requests"]) == conc for b in data["batches"])
        for r in reqs:
            assert r["status"] == 200 and r["body"]["prompt"] == prompts[r["prompt_id"]]
            assert 0 <= r["t_send"] <= r["t_written"] <= r["t_first_byte"] <= r["t_finish"]
    assert len(recordings.answers(kind)) > 64


def _choices(kind: str, name: str) -> dict[str, list[str]]:
    return {
        r["prompt_id"]: [c["text"] for c in r["response"]["choices"]]
        for b in recordings.load(kind, name)["batches"]
        for r in b["requests"]
    }


def test_neither_server_runs_beam_search() -> None:
    for kind, n in [("llama-server", 2), ("llama-cpp-python", 1)]:
        beams, greedy = _choices(kind, "beam2-rp1-c4"), _choices(kind, "greedy-rp1-c1")
        assert {len(v) for v in beams.values()} == {n}  # asked for n: 2, best_of: 2
        assert all(set(v) == {greedy[k][0]} for k, v in beams.items())  # copies of greedy


def test_llama_cpp_python_answers_one_request_at_a_time_and_llama_server_does_not() -> None:
    def staggered(kind: str) -> float:
        s = json.loads((recordings.DATA / kind / "server.json").read_text())["summary"]
        spread: float = s["probe_256_tokens_overlap"]["median_finish_spread_over_span"]
        return spread

    assert staggered("llama-cpp-python") > 0.6 > 0.2 > staggered("llama-server")


def test_only_llama_cpp_python_has_a_repeat_penalty_by_default() -> None:
    differ = {
        k: sum(
            a != b for a, b in zip(_choices(k, "greedy-c1").values(), _choices(k, "greedy-rp1-c1").values())
        )
        for k in KINDS
    }
    assert differ["llama-server"] == 0 and differ["llama-cpp-python"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_character_outside_the_alphabet_is_answered_through_the_byte_tokens(kind: str) -> None:
    # the bundled vocabulary has byte-fallback tokens ('%' is <0x25>); without them
    # llama-server answered 400 and llama-cpp-python died
    cases = {c["case"]: c for c in recordings.load(kind, "errors")["cases"]}
    case = cases["character outside the vocabulary's alphabet"]
    assert case["status"] == 200 and case["server_alive_after"]
    assert case["response"]["choices"][0]["text"]


def test_every_recording_is_of_the_same_model() -> None:
    # a recording made with another model is stale: record.py and figures.py write its digest
    digest = json.loads((recordings.DATA / "prompts.json").read_text())["model_digest"]
    paths = [
        p
        for kind in KINDS
        for p in (recordings.DATA / kind).glob("*.json")
        if p.name != "errors.json" and not p.name.startswith(("greedy-", "beam2-", "overlap-"))
    ]
    paths.append(recordings.DATA / "figures.json")
    assert len(paths) == 2 + 2 * 4 + 1  # server.json and the 4 harness runs of each, figures.json
    stale = {
        p.relative_to(recordings.DATA).as_posix(): json.loads(p.read_text())["model_digest"]
        for p in paths
        if json.loads(p.read_text())["model_digest"] != digest
    }
    assert not stale, f"recorded with another model than {digest}: {stale}"


@pytest.mark.parametrize("kind", KINDS)
def test_the_crash_run_is_a_real_server_killed_at_one_request(kind: str) -> None:
    # the recorder SIGKILLs the server when the request for FAULT_DOCUMENT arrives; that request
    # is reset unanswered and every later connection refused
    data = json.loads((recordings.DATA / kind / "harness-crash.json").read_text())  # bodies as stored
    assert data["killed"]["signal"] == "SIGKILL" and data["killed"]["returncode"] == -9
    assert data["killed"]["generate_call"] == 3 and not data["server_alive_after"]
    unanswered = [
        (b["batch"], r["body"]["prompt"]["$prompt"], r["error"])
        for b in data["batches"]
        for r in b["requests"]
        if r["status"] is None
    ]
    assert unanswered == [(3, "news-00002", "ConnectionResetError")]
    later = data["batches"][4:]
    assert later and all(
        b["requests"] == [] and b["error"].startswith("ConnectionRefusedError") for b in later
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_prompt_longer_than_the_context_is_refused_with_400_and_the_server_stays_up(kind: str) -> None:
    data = json.loads((recordings.DATA / kind / "harness-refuse.json").read_text())  # bodies as stored
    long = [r for b in data["batches"] for r in b["requests"] if isinstance(r["body"]["prompt"], str)]
    assert len(long) == 3 and {r["status"] for r in long} == {400}  # once in each cell
    others = [r for b in data["batches"] for r in b["requests"] if not isinstance(r["body"]["prompt"], str)]
    assert others and {r["status"] for r in others} == {200}
    assert data["server_alive_after"] and data["killed"] is None


def test_a_replayed_crash_refuses_the_next_connection_at_once() -> None:
    """After the replayed server dies, a retry sent straight away is refused, as the killed
    server's was, rather than queued on a listening socket that another thread still polls and
    reset later (the replay of harness-crash once saw a second reset instead of the refusal)."""
    with ReplayServer.start("llama-cpp-python", "harness-crash") as replay:
        port = replay.server_address[1]
        time.sleep(0.1)  # serve_forever waits in its poll, which holds the listening socket open
        replay.crash()
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 5) as sock:
            sock.sendall(b"GET /v1/models HTTP/1.0\r\n\r\n")
            sock.recv(1)
