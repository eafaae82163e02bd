"""What the openai backend checks in a server's answers (issue 14 A1, A2, A3; issue 15 items 8
and 11): beam search that never ran, batches served one request at a time, a server that
trickles its answer, the --request-field fields, credentials in the address.

The server is ``tests.doubles.openai_server.BehavingServer``, a test double that behaves as
the real servers were seen to behave; the replay and live tests against llama.cpp's servers
are in tests/integration/test_llama_cpp_servers.py.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.config import DecodingSettings, RunConfig
from harness.engines.base import AdoptedEngine, RequestTiming
from harness.engines.batching import BatchJudgement, cell_notice, judge_batch
from harness.engines.completions import ServerError
from harness.engines.http_batch import send_batch
from harness.engines.openai import OpenAIEngine
from harness.model.vocab import Served
from harness.redact import redact_url
from tests.doubles.openai_server import BehavingServer

GREEDY = DecodingSettings(beam_width=1, max_new_tokens=8)
BEAM2 = DecodingSettings(beam_width=2, max_new_tokens=8)


# --- A1: beam search that never happened ---------------------------------------------------


def test_one_choice_for_best_of_2_fails_at_the_first_answer(behaving: Callable[..., BehavingServer]) -> None:
    server = behaving(beams="one")
    client = OpenAIEngine(server.url, retries=0)
    with pytest.raises(
        ServerError,
        match=r"returned 1 choice for best_of 2 \(position 0\): no "
        r"beam search ran",
    ) as err:
        client.generate(["ab", "cd"], BEAM2)
    assert err.value.kind == "no-beam-search"
    assert [g.text for g in client.generate(["ab"], GREEDY)] == ["ba"]  # greedy still works


def test_identical_copies_fail_once_four_answers_show_no_beam_search(
    behaving: Callable[..., BehavingServer],
) -> None:
    server = behaving(beams="copies")
    client = OpenAIEngine(server.url, retries=0)
    for prompt in ("a1", "a2", "a3"):  # one identical answer could be a real beam search
        assert client.generate([prompt], BEAM2)[0].beams == (prompt[::-1],) * 2
    with pytest.raises(
        ServerError,
        match=r"returned 2 identical choices for best_of 2 in each "
        r"of its first 4 answers: no beam search ran",
    ):
        client.generate(["a4"], BEAM2)
    with pytest.raises(ServerError, match="identical choices"):  # every later batch too
        client.generate(["b1", "b2"], BEAM2)


def test_distinct_beams_are_evidence_of_beam_search(behaving: Callable[..., BehavingServer]) -> None:
    server = behaving(beams="distinct")
    client = OpenAIEngine(server.url, retries=0)
    for k in range(6):
        out = client.generate([f"p{k}", f"q{k}"], BEAM2)
        assert out[0].beams == (f"{k}p", f"{k}p beam1")


# --- A2: batches served one request at a time ----------------------------------------------


def _t(sent: float, written: float, finished: float, tokens: int = 10) -> RequestTiming:
    return RequestTiming(sent=sent, written=written, first_byte=finished, finished=finished, tokens=tokens)


def test_one_batch_is_judged_from_when_its_answers_ended() -> None:
    texts = ["x"] * 4
    together = [_t(0.00, 0.001, 0.20), _t(0.001, 0.002, 0.21), _t(0.002, 0.003, 0.20), _t(0.003, 0.004, 0.22)]
    serial = [_t(0.00, 0.001, 0.20), _t(0.001, 0.002, 0.41), _t(0.002, 0.003, 0.60), _t(0.003, 0.004, 0.79)]
    assert judge_batch(together, texts).verdict == Served.TOGETHER
    assert judge_batch(serial, texts).verdict == Served.ONE_AFTER_ANOTHER
    one_long = [_t(0, 0.001, 0.02, 1), _t(0, 0.002, 0.8, 100), _t(0, 0.003, 0.02, 1)]
    assert judge_batch(one_long, texts[:3]).verdict == Served.UNJUDGED  # both predictions alike
    assert judge_batch(together[:1], texts[:1]).verdict == Served.UNJUDGED
    assert judge_batch([None, None], ["a", "b"]).verdict == Served.UNJUDGED


def test_a_cell_is_untested_only_when_most_of_its_judged_batches_were_one_after_another() -> None:
    def cell(*verdicts: Served) -> str | None:
        return cell_notice([BatchJudgement(4, v) for v in verdicts])

    notice = cell(
        Served.ONE_AFTER_ANOTHER,
        Served.ONE_AFTER_ANOTHER,
        Served.TOGETHER,
        Served.ONE_AFTER_ANOTHER,
        Served.UNJUDGED,
    )
    assert notice is not None and notice.startswith(
        "the server answered these 4 requests one after another: batch positions were not exercised"
    )
    assert "3 of the 4 batches its timing could judge, of 5" in notice
    assert cell(Served.ONE_AFTER_ANOTHER, Served.ONE_AFTER_ANOTHER) is None  # 2 judged: too few to say
    assert (
        cell(Served.ONE_AFTER_ANOTHER, Served.ONE_AFTER_ANOTHER, Served.TOGETHER, Served.TOGETHER) is None
    )  # no majority
    assert cell(Served.UNJUDGED, Served.UNJUDGED, Served.UNJUDGED, Served.UNJUDGED) is None


@pytest.mark.parametrize("serial", [True, False])
def test_every_answer_is_timed_on_its_own(behaving: Callable[..., BehavingServer], serial: bool) -> None:
    """Answers read in position order would give position 1 the time position 0 took: each is
    read on its own as it comes, so a server answering all at once shows all at once."""
    server = behaving(serial=serial, seconds=0.15)
    client = OpenAIEngine(server.url, retries=0)
    out = client.generate(["a", "b", "c", "d"], GREEDY)
    assert all(g.timing is not None and g.timing.tokens == 8 for g in out)  # max_tokens 8
    ends = sorted(g.timing.finished for g in out if g.timing is not None)
    spread = ends[-1] - ends[0]
    assert (spread > 0.4) if serial else (spread < 0.1), ends
    verdict = judge_batch([g.timing for g in out], [g.text for g in out]).verdict
    assert verdict == (Served.ONE_AFTER_ANOTHER if serial else Served.TOGETHER)


# --- issue 15 item 8: the whole answer is bounded, not each read ---------------------------


def test_a_server_trickling_its_answer_times_out_after_the_request_timeout(
    behaving: Callable[..., BehavingServer],
) -> None:
    server = behaving(trickle=0.05)  # a 100-byte answer: 5 s, each read well within 1 s
    client = OpenAIEngine(server.url, request_timeout=0.8, retries=2, backoff=0.01)
    server.trickle = 0.05
    start = time.monotonic()
    with pytest.raises(
        ServerError,
        match=r"no complete answer within 0.8 s of the request "
        r"\(--request-timeout 0.8, which bounds the whole answer\)",
    ):
        client.generate(["ab", "cd"], GREEDY)
    assert time.monotonic() - start < 2.5
    assert len(server.bodies) == 2  # not resent: the server may still be working on it


# --- a server that crashes on a request refuses the next one's connection -----------------


@pytest.mark.parametrize("earlier", ["crashes", "answers"])
def test_a_request_that_cannot_be_sent_reports_an_earlier_failure_first(
    behaving: Callable[..., BehavingServer], earlier: str
) -> None:
    """The crash of request 0 is the first symptom, not the refused connection of request 1
    (which comes before request 0's reader sees its connection closed)."""
    server = behaving(crash_at=1 if earlier == "crashes" else None)
    host, port = server.server_address[:2]
    assert isinstance(host, str)  # an IPv4 address
    calls: list[float] = []

    def connect(timeout: float) -> http.client.HTTPConnection:
        calls.append(timeout)
        if len(calls) == 2:
            time.sleep(0.05)  # the crash is under way; the next connection is refused
            raise ConnectionRefusedError(111, "Connection refused")
        return http.client.HTTPConnection(host, port, timeout=timeout)

    bodies = [{"model": "m", "prompt": p, "max_tokens": 4} for p in ("ab", "cd")]
    if earlier == "crashes":
        answers = send_batch(connect, "/v1/completions", bodies, {}, 10.0)
        assert len(answers) == 1 and isinstance(answers[0].error, http.client.RemoteDisconnected)
    else:
        with pytest.raises(ConnectionRefusedError):
            send_batch(connect, "/v1/completions", bodies, {}, 10.0)


# --- A3: --request-field --------------------------------------------------------------------


def test_request_fields_go_with_every_request_and_key_the_settings(
    behaving: Callable[..., BehavingServer],
) -> None:
    server = behaving(beams="distinct")
    client = OpenAIEngine(server.url, retries=0)
    config = RunConfig.from_options(
        {
            "engine": server.url,
            "max_new_tokens": "8",
            "request_fields": [(("repeat_penalty", "1.0"),), (("stop", '["END"]'), ("top_k", "1"))],
        }
    )
    settings = config.decoding(2)
    client.generate(["ab", "cd"], settings)
    for body in server.bodies:
        assert body["repeat_penalty"] == 1.0 and body["stop"] == ["END"] and body["top_k"] == 1
        assert body["n"] == 2 and body["best_of"] == 2 and body["use_beam_search"] is True
    assert settings.as_dict()["request_fields"] == {"repeat_penalty": 1.0, "stop": ["END"], "top_k": 1}
    assert "request_fields" not in config.decoding(2).__class__(2, 8).as_dict()  # old keys kept
    assert config.as_dict()["request_fields"] == {"repeat_penalty": 1.0, "stop": ["END"], "top_k": 1}


@pytest.mark.parametrize(
    "given, message",
    [
        (
            "n=2",
            "--request-field 'n=2': n is set by the harness (--beam-widths); reserved: model, "
            "prompt, max_tokens, temperature, n, best_of, use_beam_search, length_penalty, "
            "early_stopping, stream, echo",
        ),
        ("max_tokens=5", "max_tokens is set by the harness (--max-new-tokens)"),
        ('{"prompt": "x"}', "prompt is set by the harness"),
        ("repeat_penalty", "expected KEY=VALUE (VALUE as JSON, else a string)"),
        ("x=NaN", "NaN and Infinity are not JSON"),
        ("x=[1,", "the value is not valid JSON"),
        ("x=" + "[" * 50 + "]" * 50, "nests deeper than 16 levels"),
        ("{}", "expected a JSON object of fields"),
    ],
)
def test_bad_request_fields_are_one_line_naming_the_option(given: str, message: str) -> None:
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="^--request-field") as err:
        RunConfig.from_options({"engine": "http://h:1/v1", "request_fields": [given]})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_request_fields_are_refused_for_engines_that_are_not_servers() -> None:
    from harness.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match="^--request-field applies only to an OpenAI-compatible "
        "server: use it with --engine http://HOST:PORT/v1$",
    ):
        RunConfig.from_options({"request_fields": ["repeat_penalty=1.0"]})
    with pytest.raises(ConfigError, match="repeat_penalty is given twice"):
        RunConfig.from_options(
            {"engine": "http://h:1/v1", "request_fields": ["repeat_penalty=1.0", "repeat_penalty=1.1"]}
        )


# --- issue 15 item 11: credentials in the address --------------------------------------------


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://h:8000/v1?api_key=sk-live-123", "http://h:8000/v1?api_key=REDACTED"),
        # every query value: a gateway decides what its parameters mean (issue 24, class 2)
        (
            "https://gw.example/v1?X-Amz-Signature=abc&region=eu",
            "https://gw.example/v1?X-Amz-Signature=REDACTED&region=REDACTED",
        ),
        ("http://h:1/v1?tenant=secret&flag=", "http://h:1/v1?tenant=REDACTED&flag="),
        ("http://h/v1?k=3f9a0c1d2e4b5a6978", "http://h/v1?k=REDACTED"),
        ("http://user:pw@h:1/v1", "http://REDACTED@h:1/v1"),
        ("http://h:1/v1#token", "http://h:1/v1#REDACTED"),
        ("http://h:1/v1", "http://h:1/v1"),
        ("engines/bw1", "engines/bw1"),
    ],
)
def test_credential_looking_parts_of_urls_are_redacted(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_key_in_the_query_reaches_the_server_but_never_the_report(
    behaving: Callable[..., BehavingServer], tmp_path: Path
) -> None:
    server = behaving()
    url = server.url + "?api_key=sk-SECRET-42"
    client = OpenAIEngine(url, retries=0)
    client.generate(["ab"], GREEDY)
    assert server.paths == ["/v1/models?api_key=sk-SECRET-42", "/v1/completions?api_key=sk-SECRET-42"]
    assert client.info.path == server.url + "?api_key=REDACTED"
    assert "SECRET" not in json.dumps(RunConfig.from_options({"engine": url}).as_dict())
    with pytest.raises(Exception) as err:
        OpenAIEngine("http://user:hunter2@127.0.0.1:1/v1")
    assert "hunter2" not in str(err.value)


def test_a_users_server_class_is_named_by_the_redacted_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.engines.registry import load_engine

    (tmp_path / "plainserver.py").write_text(
        "class Plain:\n    def __init__(self, url):\n        self.url = url\n\n"
        "    def generate(self, prompts, settings):\n        return []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    engine = load_engine("http://h:1/v1?token=abc123", "plainserver:Plain")
    assert isinstance(engine, AdoptedEngine)  # a user's class, seen through the adopter
    assert engine.url == "http://h:1/v1?token=abc123"  # the class gets the address it needs
    assert engine.info.path == "http://h:1/v1?token=REDACTED"
    assert "abc123" not in engine.info.identity
