"""The recorded answers of real servers (tests/data/servers/) are complete and tell what the
servers really do (see tests/servers/README.md)."""

from __future__ import annotations

import json

import pytest

from tests.servers import recordings
from tests.servers.verify_tokenizer import bundled_prompts

KINDS = ("llama-server", "llama-cpp-python")


@pytest.mark.parametrize("kind", KINDS)
def test_every_request_set_has_its_64_prompts_timed_and_answered(kind):
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


def _choices(kind, name):
    return {r["prompt_id"]: [c["text"] for c in r["response"]["choices"]]
            for b in recordings.load(kind, name)["batches"] for r in b["requests"]}


def test_neither_server_runs_beam_search():
    for kind, n in [("llama-server", 2), ("llama-cpp-python", 1)]:
        beams, greedy = _choices(kind, "beam2-rp1-c4"), _choices(kind, "greedy-rp1-c1")
        assert {len(v) for v in beams.values()} == {n}  # asked for n: 2, best_of: 2
        assert all(set(v) == {greedy[k][0]} for k, v in beams.items())  # copies of greedy


def test_llama_cpp_python_answers_one_request_at_a_time_and_llama_server_does_not():
    def staggered(kind):
        s = json.loads((recordings.DATA / kind / "server.json").read_text())["summary"]
        return s["probe_256_tokens_overlap"]["median_finish_spread_over_span"]
    assert staggered("llama-cpp-python") > 0.6 > 0.2 > staggered("llama-server")


def test_only_llama_cpp_python_has_a_repeat_penalty_by_default():
    differ = {k: sum(a != b for a, b in zip(_choices(k, "greedy-c1").values(),
                                            _choices(k, "greedy-rp1-c1").values())) for k in KINDS}
    assert differ["llama-server"] == 0 and differ["llama-cpp-python"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_character_outside_the_alphabet_is_answered_through_the_byte_tokens(kind):
    # the bundled vocabulary has byte-fallback tokens ('%' is <0x25>); without them
    # llama-server answered 400 and llama-cpp-python died
    cases = {c["case"]: c for c in recordings.load(kind, "errors")["cases"]}
    case = cases["character outside the vocabulary's alphabet"]
    assert case["status"] == 200 and case["server_alive_after"]
    assert case["response"]["choices"][0]["text"]
