"""The openai backend and `python -m harness serve`, over real HTTP on loopback.

The servers here are real ``http.server`` servers in this process. Two stand-ins are test
doubles, defined in openai_doubles.py: ``ScriptedServer`` (answers from a script, to make
503s, 400s and slow answers) and ``RecordingEngine`` (records each generate call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.config import DecodingSettings, EngineOptions, RunConfig
from harness.engines.base import AdoptedEngine
from harness.engines.completions import ServerError
from harness.engines.openai import POSITION_SEMANTICS, OpenAIEngine
from harness.engines.registry import load_engine, peek_config
from harness.errors import ConfigError, EngineError
from harness.tools.serve import (
    BadRequest,
    Batcher,
    CompletionServer,
    Pending,
    base_url,
    make_server,
    parse_completion,
)
from tests.processes import run_harness
from tests.serving import post, started
from tests.unit.engines.openai_doubles import RecordingEngine, ScriptedServer

GREEDY = DecodingSettings(beam_width=1, max_new_tokens=8)
BEAM2 = DecodingSettings(beam_width=2, max_new_tokens=8, length_penalty=0.5)
Served = Callable[[RecordingEngine], CompletionServer]  # the served fixture: start(engine)


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedServer]]:
    """start(*script) -> a ScriptedServer serving from a thread (stopped after the test)."""
    yield from started(ScriptedServer)


def _serve(engine: RecordingEngine) -> CompletionServer:
    return make_server(engine, model_name="double", window_ms=300, max_batch_size=8)


@pytest.fixture
def served() -> Iterator[Served]:
    """start(engine) -> `python -m harness serve`'s server around ``engine``, serving from a
    thread (stopped, the engine closed, after the test)."""
    yield from started(_serve)


# --- the server ---------------------------------------------------------------------------


def test_server_batches_concurrent_requests_into_one_call_in_arrival_order(served: Served) -> None:
    engine = RecordingEngine()
    url = base_url(served(engine))
    client = OpenAIEngine(url, retries=0)
    prompts = ["p0", "p1", "p2", "p3"]
    out = client.generate(prompts, GREEDY)
    assert engine.calls == [(prompts, GREEDY)]  # one engine batch, slot i = position i
    assert [g.text for g in out] == ["P0", "P1", "P2", "P3"]
    out = client.generate(prompts[::-1], BEAM2)
    assert engine.calls[1] == (prompts[::-1], BEAM2)
    assert [g.beams for g in out] == [(p.upper(), f"{p.upper()}#1") for p in prompts[::-1]]


def test_client_identity_and_position_note(served: Served) -> None:
    url = base_url(served(RecordingEngine()))
    client = OpenAIEngine(url)
    assert client.info.backend == "openai" and client.info.path == url
    assert client.info.identity == "server:double@double:1"  # model id @ the root it reports
    assert client.info.details["position_semantics"] == POSITION_SEMANTICS
    assert client.limits is None


def test_server_keeps_different_settings_apart() -> None:
    engine = RecordingEngine()
    batcher = Batcher(engine, max_batch_size=8, window_s=0.05)
    items = [
        Pending(arrival=(i, 0), prompt=f"p{i}", settings=GREEDY if i % 2 else BEAM2) for i in (3, 0, 2, 1)
    ]  # handler threads may enqueue out of accept order
    batcher.submit(items)
    first = batcher.next_batch()  # the settings of the first request taken, in arrival order
    assert first is not None
    assert [p.prompt for p in first] == ["p1", "p3"]
    second = batcher.next_batch()
    assert second is not None
    assert [p.prompt for p in second] == ["p0", "p2"]
    batcher.run_batch(first)
    assert engine.calls == [(["p1", "p3"], GREEDY)]
    assert [p.batch for p in first] == [
        {"id": 0, "size": 2, "position": 0, "beam_width": 1},
        {"id": 0, "size": 2, "position": 1, "beam_width": 1},
    ]


def test_server_caps_batches_at_max_batch_size() -> None:
    batcher = Batcher(RecordingEngine(), max_batch_size=3, window_s=0.05)
    batcher.submit([Pending(arrival=(i, 0), prompt=f"p{i}", settings=GREEDY) for i in range(5)])
    first, second = batcher.next_batch(), batcher.next_batch()
    assert first is not None and second is not None
    assert [p.prompt for p in first] == ["p0", "p1", "p2"]
    assert [p.prompt for p in second] == ["p3", "p4"]


def test_engine_exception_is_a_500_with_its_message(served: Served) -> None:
    url = base_url(served(RecordingEngine()))
    client = OpenAIEngine(url, retries=0)
    with pytest.raises(
        ServerError,
        match=r"last: HTTP 500 at position 0: RuntimeError: the "
        r"engine broke on purpose$",
    ):
        client.generate(["boom"], GREEDY)


@pytest.mark.parametrize(
    "body, message",
    [
        ({"prompt": "x", "temperature": 0.7}, "send temperature 0"),
        ({"prompt": "x", "n": 2}, "needs use_beam_search"),
        ({"prompt": "x", "use_beam_search": True, "n": 4, "best_of": 2}, "more than the beam width"),
        ({"prompt": 3}, "prompt must be a string"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"prompt": "x", "model": "other"}, "not served here"),
        ({"prompt": "x", "stream": True}, "stream is not supported"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_requests(body: object, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        parse_completion(body, "double")


def test_beam_fields_as_trtllm_serve_and_vllm_send_them() -> None:
    _, s, n = parse_completion(
        {"prompt": "x", "use_beam_search": True, "n": 1, "best_of": 4, "max_tokens": 5}, "double"
    )  # trtllm-serve: width from best_of
    assert (s.beam_width, s.max_new_tokens, n) == (4, 5, 1)
    _, s, n = parse_completion(
        {"prompt": "x", "use_beam_search": True, "n": 3, "length_penalty": 0.6, "early_stopping": False},
        "double",
    )  # vLLM
    assert (s.beam_width, s.length_penalty, s.early_stopping, n) == (3, 0.6, False, 3)


def test_bad_request_over_http_is_a_400_and_not_retried(served: Served) -> None:
    status, body = post(served(RecordingEngine()), b"{not json")
    assert status == 400
    assert "not JSON" in body["error"]["message"]


def test_serve_refuses_a_non_loopback_host() -> None:
    with pytest.raises(ConfigError, match="--host 0.0.0.0: serve listens on loopback only"):
        make_server(RecordingEngine(), host="0.0.0.0", model_name="x", max_batch_size=1)


# --- the client against scripted answers ----------------------------------------------------


def test_retries_a_503_then_succeeds(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted((503, 0), (503, 0), (200, 0))
    client = OpenAIEngine(server.url, retries=2, backoff=0.01)
    out = client.generate(["ab", "cd"], GREEDY)
    assert [g.text for g in out] == ["ba", "dc"]
    # attempt 1: both sent, a 503 came back -> the whole batch again, in order, so slots hold
    assert [p["prompt"] for p in server.posts] == ["ab", "cd", "ab", "cd"]
    assert server.posts[0] == {"model": "m", "prompt": "ab", "max_tokens": 8, "temperature": 0.0, "n": 1}


def test_gives_up_after_the_retries(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted((503, 0))
    client = OpenAIEngine(server.url, retries=1, backoff=0.01)
    with pytest.raises(
        ServerError,
        match=r"failed 2 time\(s\) \(--retries 1\); last: HTTP 503 "
        r"at position 0: scripted 503",
    ):
        client.generate(["ab"], GREEDY)
    assert len(server.posts) == 2


def test_never_retries_a_400(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted((400, 0))
    client = OpenAIEngine(server.url, retries=3, backoff=0.01)
    with pytest.raises(ServerError, match="HTTP 400 at position 0: scripted 400"):
        client.generate(["ab"], BEAM2)
    assert len(server.posts) == 1
    assert server.posts[0] == {
        "model": "m",
        "prompt": "ab",
        "max_tokens": 8,
        "temperature": 0.0,
        "n": 2,
        "best_of": 2,
        "use_beam_search": True,
        "length_penalty": 0.5,
        "early_stopping": True,
    }


def test_timeout_names_the_option(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted((200, 2.0))
    client = OpenAIEngine(server.url, request_timeout=0.3, retries=2, backoff=0.01)
    with pytest.raises(
        ServerError,
        match=r"no complete answer within 0.3 s of the request "
        r"\(--request-timeout 0.3, which bounds the whole answer\)",
    ):
        client.generate(["ab"], GREEDY)
    assert len(server.posts) == 1  # a timed-out batch may still be running there: not resent


def test_model_option_must_be_served(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted((200, 0))
    with pytest.raises(EngineError, match="--model 'x': the server at .* serves m; pass one"):
        OpenAIEngine(server.url, model="x")
    assert OpenAIEngine(server.url, model="m").model == "m"


def test_unreachable_server_fails_at_load_with_the_address() -> None:
    with pytest.raises(EngineError) as err:
        OpenAIEngine("http://127.0.0.1:1/v1", retries=1, backoff=0.01)
    message = str(err.value)
    assert message.startswith(
        "--engine http://127.0.0.1:1/v1: cannot reach the server at 127.0.0.1:1 after 2 attempts ("
    )
    assert "python -m harness serve --engine DIR --port 1" in message and "\n" not in message


def test_unreachable_server_cli_one_line_no_traceback(tmp_path: Path) -> None:
    proc = run_harness(
        "run", "--engine", "http://127.0.0.1:1/v1", "--report-dir", str(tmp_path), cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(
        "error: --engine http://127.0.0.1:1/v1: cannot reach the server at 127.0.0.1:1"
    )
    assert not list(tmp_path.glob("*/report.json"))


# --- registry and options -------------------------------------------------------------------


def test_urls_select_the_openai_backend_without_config(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted((200, 0))
    assert peek_config(server.url) is None
    assert peek_config(server.url, "openai") is None
    engine = load_engine(server.url, options=EngineOptions(request_timeout=5.0, retries=0))
    assert isinstance(engine, OpenAIEngine) and engine.request_timeout == 5.0 and engine.retries == 0


def test_server_options_need_a_server() -> None:
    with pytest.raises(ConfigError, match="--model applies only to an OpenAI-compatible server"):
        RunConfig.from_options({"model": "m"})
    with pytest.raises(ConfigError, match="--retries applies only"):
        RunConfig.from_options({"engine": "some/dir", "retries": "3"})
    config = RunConfig.from_options({"engine": "http://h:1/v1", "request_timeout": "2.5", "retries": "0"})
    assert config.engine_options.server_kwargs() == {
        "model": None,
        "request_timeout": 2.5,
        "retries": 0,
        "api_key_env": None,
    }
    with pytest.raises(ConfigError, match="--request-timeout '0': must be more than 0"):
        RunConfig.from_options({"engine": "http://h:1/v1", "request_timeout": "0"})


def test_a_subclass_of_the_openai_backend_gets_the_server_options(
    scripted: Callable[..., ScriptedServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--backend mymod:MyOpenAI --engine http://...: --model, --request-timeout and --retries
    reach any class that takes them (issue 14, A4), not only the backend named openai."""
    (tmp_path / "mybackends.py").write_text(
        "from harness.engines.openai import OpenAIEngine\n\n"
        "class MyOpenAI(OpenAIEngine):\n    pass\n\n"
        "class Takes:\n"
        "    def __init__(self, url, *, model=None, retries=5):\n"
        "        self.url, self.model, self.retries = url, model, retries\n\n"
        "    def generate(self, prompts, settings):\n        return []\n\n"
        "class Plain:\n"
        "    def __init__(self, url):\n        self.url = url\n\n"
        "    def generate(self, prompts, settings):\n        return []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    server = scripted((200, 0))
    with pytest.raises(EngineError, match="--model 'does-not-exist': the server at .* serves m"):
        load_engine(server.url, "mybackends:MyOpenAI", EngineOptions(model="does-not-exist"))
    engine = load_engine(
        server.url, "mybackends:MyOpenAI", EngineOptions(model="m", request_timeout=5.0, retries=0)
    )
    assert isinstance(engine, OpenAIEngine)  # a subclass of a backend: the engine itself
    assert (engine.model, engine.request_timeout, engine.retries) == ("m", 5.0, 0)
    taken = load_engine(server.url, "mybackends:Takes", EngineOptions(model="m", retries=0))
    assert isinstance(taken, AdoptedEngine)  # any other class: seen through the adopter
    assert (taken.url, taken.model, taken.retries) == (server.url, "m", 0)  # only its parameters
    plain = load_engine(server.url, "mybackends:Plain", EngineOptions(model="m"))
    assert isinstance(plain, AdoptedEngine)
    assert plain.url == server.url
