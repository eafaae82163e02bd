"""Real third-party servers, started by the test: llama.cpp's llama-server and
llama-cpp-python[server] with the bundled model converted to GGUF (tests/servers/).

The live tests skip unless the servers are built (``python -m tests.servers.llama_cpp build``,
about 10 to 15 minutes on 2 cores; CI builds them, see tests/servers/README.md). The answers
recorded from them lie in tests/data/servers/; the replay tests serve them again and run
everywhere.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from pathlib import Path
from typing import Any, TypeAlias

import pytest

from harness.outside import clean
from harness.pipeline import RunOutcome
from tests.integration.common import run_here
from tests.servers import harness_runs, llama_cpp, recordings
from tests.servers.replay import ReplayServer
from tests.servers.verify_tokenizer import bundled_prompts, server_tokenize

FIXTURES = llama_cpp.REPO / "tests" / "data" / "servers"


REQUIRE = "HARNESS_REQUIRE_LLAMA_CPP"  # set by .ci/run: CI builds the servers, so they must run


def _unavailable(kind: llama_cpp.Kind) -> None:
    """Skip (fail where REQUIRE is set) unless ``kind`` is built."""
    if (reason := llama_cpp.available(kind)) is not None:
        if os.environ.get(REQUIRE):
            pytest.fail(f"{REQUIRE} is set but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def gguf() -> Path:
    _unavailable("llama-server")
    return llama_cpp.convert()


def _completion(server: llama_cpp.Server, prompt: str, **extra: object) -> dict[str, Any]:
    body = {"model": server.model, "prompt": prompt, "max_tokens": 64, "temperature": 0.0, "n": 1, **extra}
    req = urllib.request.Request(
        f"{server.base_url}/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        answer: dict[str, Any] = json.loads(r.read())
    return answer


@pytest.mark.slow  # a real server (CI builds them)
@pytest.mark.parametrize("kind", llama_cpp.KINDS)
def test_a_real_server_starts_tokenizes_like_transformers_answers_as_recorded_and_stops(
    kind: llama_cpp.Kind, gguf: Path
) -> None:
    _unavailable(kind)
    from transformers import AutoTokenizer

    recorded = json.loads((FIXTURES / kind / "greedy-rp1-c1.json").read_text(encoding="utf-8"))
    meta = json.loads((FIXTURES / kind / "server.json").read_text(encoding="utf-8"))
    digest = llama_cpp.model_digest(llama_cpp.BUNDLED_MODEL)
    assert meta["model_digest"] == digest, (
        f"tests/data/servers/{kind} was recorded with model {meta['model_digest']}, the bundled one "
        f"is {digest}: re-record with python -m tests.servers.record"
    )
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


# --- the harness through the real servers: recorded (replayed everywhere) and live -----------
#
# Issue 14 A1 (no beam search), A2 (no batching), A3 (--request-field), A5 (a crash mid-run,
# and a refusal):
# tests/servers/harness_runs.py names the runs; record.py recorded each through both servers
# (every try of every batch, timed); tests/servers/replay.py serves those answers again at their
# recorded times, so these checks run without the build. With the build, the same runs go
# through freshly started servers and must show the same.

Cells: TypeAlias = dict[str, dict[str, Any]]  # per cell id: verdict, error and notice (harness_runs.cells)
RUN_KINDS = [(kind, name) for kind in llama_cpp.KINDS for name in harness_runs.RUNS]


def _check_grid(kind: str, cells: Cells) -> None:
    """What harness-grid(-rp1) must show on each server."""
    assert cells["bs1-beam1"]["verdict"] == "pass"
    for size in (2, 4):
        cell = cells[f"bs{size}-beam1"]
        if kind == "llama-cpp-python":  # one lock around the model: a queue, not a batch
            assert cell["verdict"] == "untested", cell
            assert cell["notice"].startswith(
                f"the server answered these {size} requests one "
                "after another: batch positions were not exercised"
            )
        else:  # --parallel 4: batched
            assert cell["verdict"] == "pass" and cell["notice"] is None, cell
    first = cells["bs1-beam2"]["error"]
    reason = (
        "returned 1 choice for best_of 2 (position 0): no beam search ran"
        if kind == "llama-cpp-python"
        else "returned 2 identical choices for best_of 2 in each of its first 4 answers: no beam search ran"
    )
    assert reason in first and "(the run's first failure: bs1-beam2, batch " in first
    for size in (2, 4):
        assert cells[f"bs{size}-beam2"]["error"].startswith(
            "failed the same way as the run's first failure, bs1-beam2 (batch "
        )


def _check_fault(kind: str, name: str, cells: Cells) -> None:
    """harness-crash: the server, killed (SIGKILL) when the request for FAULT_DOCUMENT arrives,
    is named at that batch and prompt, and the later cells failed the same way; harness-refuse:
    both servers refuse the over-long prompt with HTTP 400, the same report."""
    first = cells["bs1-beam1"]["error"]
    if harness_runs.RUNS[name].fault == "kill":
        symptom = (
            "a batch of 1 failed 2 time(s) (--retries 1); first: ConnectionResetError at "
            "position 0: Connection reset by peer; last: ConnectionRefusedError: Connection "
            "refused"
        )
    else:
        symptom = "HTTP 400 at position 0: " + (
            "request (784 tokens) exceeds the available context size (512 tokens)"
            if kind == "llama-server"
            else "This model's maximum context length is 512 tokens, "
            "however you requested 848 tokens (784 in your prompt; 64 for the completion)"
        )
    assert symptom in first, first
    fault_id = harness_runs.fault_id()
    assert f"(the run's first failure: bs1-beam1, batch 4 of 8, prompt {fault_id})" in first
    for cid in ("bs2-beam1", "bs4-beam1"):
        assert cells[cid]["error"].startswith(
            f"failed the same way as the run's first failure, bs1-beam1 (batch 4 of 8, prompt {fault_id}): "
        )
        assert symptom in cells[cid]["error"]


def _check(kind: str, name: str, cells: Cells) -> None:
    if harness_runs.RUNS[name].fault:
        _check_fault(kind, name, cells)
    else:
        _check_grid(kind, cells)


def _stable(cells: Cells) -> Cells:
    """Cells without the batch counts of a notice (timing: one batch may go either way)."""
    return {cid: {**c, "notice": c["notice"] and c["notice"].split(" (")[0]} for cid, c in cells.items()}


def _as_reported(cells: Cells, shown: str) -> Cells:
    """Recorded cells as a report holds them: the recording kept each cell's text as the run
    held it, with the server's address as $SERVER; the report holds it cleaned (secrets
    redacted, control characters escaped) with the address in place, as every reader sees it."""
    return {
        cid: {
            k: clean(v.replace("$SERVER", shown)).replace(shown, "$SERVER") if isinstance(v, str) else v
            for k, v in c.items()
        }
        for cid, c in cells.items()
    }


def _outputs(result: RunOutcome) -> dict[str, str | None]:
    """Batch size 1's output per document, as the run wrote them to generations.jsonl."""
    lines = (result.folder / "generations.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    return {row["id"]: row["output"] for row in rows if row["cell"] == "bs1-beam1"}


KEY = "sk-test-0123456789abcdef"  # a key in the address: sent, never shown (issue 15, item 11)


def _run_keyed(
    spec: harness_runs.HarnessRun, url: str, folder: Path, server: llama_cpp.Server | None = None
) -> tuple[Cells, RunOutcome]:
    """The harness run against ``url`` with a key in its query string; its cells with the
    address as $SERVER, and the result. Nothing in the run folder or the cells has the key;
    report.md says there are no build limits to check (issue 14 A6). With a live ``server``,
    a "kill" run's engine kills it when the request for FAULT_DOCUMENT arrives."""
    config = harness_runs.config(spec, f"{url}?api_key={KEY}", folder)
    engine: harness_runs.Killer | None = None
    if server is not None and spec.fault == "kill":
        engine = harness_runs.Killer(
            config.engine,
            request_timeout=config.engine_options.request_timeout,
            retries=config.engine_options.retries,
        )
        engine.arm(server.process, dict(bundled_prompts())[harness_runs.fault_id()])
    result = run_here(config, engine=engine)
    if engine is not None:
        assert engine.killed is not None and engine.killed["generate_call"] == 3
    shown = f"{url}?api_key=REDACTED"
    cells = {
        cid: {k: (v.replace(shown, "$SERVER") if isinstance(v, str) else v) for k, v in c.items()}
        for cid, c in harness_runs.cells(result).items()
    }
    assert KEY not in json.dumps(cells)
    for path in result.folder.iterdir():
        assert KEY not in path.read_text(encoding="utf-8"), path.name
    md = (result.folder / "report.md").read_text(encoding="utf-8")
    assert "- Build limits: the engine records no build limits, so none were checked." in md
    return cells, result


@pytest.mark.slow  # answers replayed at their recorded times
@pytest.mark.parametrize("kind, name", RUN_KINDS)
def test_replayed_server_answers_give_the_recorded_verdicts(kind: str, name: str, tmp_path: Path) -> None:
    recorded = recordings.load(kind, name)
    with ReplayServer.start(kind, name) as replay:
        cells, _ = _run_keyed(harness_runs.RUNS[name], replay.url, tmp_path)
    _check(kind, name, cells)
    assert _stable(cells) == _stable(_as_reported(recorded["cells"], f"{replay.url}?api_key=REDACTED"))
    if harness_runs.RUNS[name].request_fields:  # strict lookup: every body carried the field
        assert replay.received and all(b.get("repeat_penalty") == 1.0 for b in replay.received)


@pytest.mark.slow
def test_replayed_repeat_penalty_changes_only_llama_cpp_python(tmp_path: Path) -> None:
    """--request-field repeat_penalty=1.0 reaches the server: llama-cpp-python's default (1.1)
    changed an output of the 8, llama-server's default is 1.0 already."""
    changed: dict[str, int] = {}
    for kind in llama_cpp.KINDS:
        texts: list[dict[str, str | None]] = []
        for name in ("harness-grid", "harness-grid-rp1"):
            with ReplayServer.start(kind, name) as replay:
                texts.append(
                    _outputs(
                        run_here(
                            harness_runs.config(harness_runs.RUNS[name], replay.url, tmp_path / kind / name)
                        )
                    )
                )
        changed[kind] = sum(texts[0][k] != texts[1][k] for k in texts[0])
    assert changed["llama-cpp-python"] >= 1 and changed["llama-server"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", llama_cpp.KINDS)
def test_the_harness_through_a_live_server(kind: llama_cpp.Kind, gguf: Path, tmp_path: Path) -> None:
    """Every harness run through a freshly started real server shows what its recording shows."""
    _unavailable(kind)

    for name, spec in harness_runs.RUNS.items():
        with llama_cpp.start(kind, gguf, parallel=4) as server:
            cells, _ = _run_keyed(spec, server.base_url, tmp_path / name, server)
            _check(kind, name, cells)
            assert server.alive() == (spec.fault != "kill")
