"""Real third-party servers, started by the test: llama.cpp's llama-server and
llama-cpp-python[server] with the bundled model converted to GGUF (tests/servers/).

Skipped unless they are built (``python -m tests.servers.llama_cpp build``, about 10 to 15
minutes on 2 cores; see tests/servers/README.md). The answers recorded from them lie in
tests/data/servers/ for the tests that must run everywhere.
"""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from tests.servers import llama_cpp
from tests.servers.verify_tokenizer import bundled_prompts, server_tokenize

FIXTURES = llama_cpp.REPO / "tests" / "data" / "servers"


@pytest.fixture(scope="module")
def gguf():
    if (reason := llama_cpp.available("llama-server")) is not None:
        pytest.skip(reason)
    return llama_cpp.convert()


def _completion(server: llama_cpp.Server, prompt: str, **extra) -> dict:
    body = {"model": server.model, "prompt": prompt, "max_tokens": 64, "temperature": 0.0, "n": 1, **extra}
    req = urllib.request.Request(f"{server.base_url}/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("kind", llama_cpp.KINDS)
def test_a_real_server_starts_tokenizes_like_transformers_answers_as_recorded_and_stops(kind, gguf):
    if (reason := llama_cpp.available(kind)) is not None:
        pytest.skip(reason)
    from transformers import AutoTokenizer

    recorded = json.loads((FIXTURES / kind / "greedy-rp1-c1.json").read_text(encoding="utf-8"))
    meta = json.loads((FIXTURES / kind / "server.json").read_text(encoding="utf-8"))
    digest = llama_cpp.model_digest(llama_cpp.BUNDLED_MODEL)
    assert meta["model_digest"] == digest, (
        f"tests/data/servers/{kind} was recorded with model {meta['model_digest']}, the bundled one "
        f"is {digest}: re-record with python -m tests.servers.record")
    hf = AutoTokenizer.from_pretrained(str(llama_cpp.BUNDLED_MODEL))
    prompts = bundled_prompts()[:4]

    with llama_cpp.start(kind, gguf, parallel=2, alias="bundled-test") as server:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=10) as r:
            assert [m["id"] for m in json.loads(r.read())["data"]] == ["bundled-test"]
        for _, text in prompts:
            assert server_tokenize(server, text) == hf(text)["input_ids"]
        first = recorded["batches"][0]["requests"][0]
        answer = _completion(server, dict(prompts)[first["prompt_id"]], repeat_penalty=1.0)
        assert answer["choices"][0]["text"] == first["response"]["choices"][0]["text"]
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])

    assert server.process.returncode is not None
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
