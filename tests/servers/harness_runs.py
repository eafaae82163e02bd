"""The harness's own runs through a real server: what ``record.py`` records (every request and
answer, timed) and what the replay and live tests in
tests/integration/test_llama_cpp_servers.py run again.

Each run is the openai backend through the whole pipeline (``harness.pipeline.run``) over the
first ``PROMPTS`` bundled documents, 64 new tokens:

* ``harness-grid``: batch sizes 1, 2, 4 x beam widths 1, 2, the server's own sampling defaults;
* ``harness-grid-rp1``: the same with ``--request-field repeat_penalty=1.0``;
* ``harness-crash``: batch sizes 1, 2, 4 at beam width 1; the server is killed (SIGKILL) when
  the request for one document (``FAULT_DOCUMENT``) arrives: ``Killer`` stops the server
  process (SIGSTOP) before that request is written and kills it once it is, so the request is
  never answered and the connection is reset, whatever the server would have made of it;
* ``harness-refuse``: the same grid, one document made longer than the server's context (its
  text 4 times over, about 600 tokens against 512): both servers refuse it with HTTP 400 and
  stay up.

(Until the bundled model had byte-fallback tokens, a ``%`` in a prompt crashed
llama-cpp-python and made llama-server answer 400; with them both answer it, so the crash is
now the recorder's doing and the refusal a prompt too long.)

``Killer`` is the openai backend that kills the server at that request (armed with
``arm``, inert otherwise); ``Recorder`` is a ``Killer`` with every try of every batch kept
(bodies, statuses, answers, timings), for ``record.py``.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config import RunConfig
from harness.engines.http_batch import Answer
from harness.engines.openai import OpenAIEngine
from harness.inputs.data import load_dataset

if TYPE_CHECKING:
    from harness.pipeline import RunOutcome

PROMPTS = 8
MAX_NEW_TOKENS = 64
FAULT_DOCUMENT = 2  # index of the document whose request kills the server, or is too long
LONG_REPEAT = 4  # harness-refuse: that document's text this many times over


@dataclass(frozen=True)
class HarnessRun:
    name: str
    batch_sizes: tuple[int, ...]
    beam_widths: tuple[int, ...]
    request_fields: tuple[str, ...] = ()
    fault: str | None = None  # "kill": the server is killed at FAULT_DOCUMENT; "long": it is too long


RUNS: dict[str, HarnessRun] = {
    r.name: r
    for r in (
        HarnessRun("harness-grid", (1, 2, 4), (1, 2)),
        HarnessRun("harness-grid-rp1", (1, 2, 4), (1, 2), ("repeat_penalty=1.0",)),
        HarnessRun("harness-crash", (1, 2, 4), (1,), fault="kill"),
        HarnessRun("harness-refuse", (1, 2, 4), (1,), fault="long"),
    )
}


def fault_id() -> str:
    """The id of the document the fault is on."""
    return load_dataset(None).documents[FAULT_DOCUMENT].id


def dataset(folder: Path, fault: str | None = None) -> Path:
    """The first PROMPTS bundled documents as a JSONL file (FAULT_DOCUMENT's text LONG_REPEAT
    times over when ``fault`` is "long")."""
    docs = load_dataset(None).documents[:PROMPTS]
    path = folder / ("long.jsonl" if fault == "long" else "grid.jsonl")
    rows = [
        {
            "id": d.id,
            "text": d.text * (LONG_REPEAT if fault == "long" and i == FAULT_DOCUMENT else 1),
            "summary": d.summary,
        }
        for i, d in enumerate(docs)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def config(run: HarnessRun, url: str, folder: Path) -> RunConfig:
    """The run's options, as `pytest suites/ --engine URL ...` would give them."""
    folder.mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {
        "engine": url,
        "dataset": str(dataset(folder, run.fault)),
        "batch_sizes": run.batch_sizes,
        "beam_widths": run.beam_widths,
        "max_new_tokens": MAX_NEW_TOKENS,
        "report_dir": str(folder / "reports"),
        "no_cache": True,
        "retries": 1,
        "looks": 1,  # the fixed design: the recordings answer its requests, in its order
    }
    if run.request_fields:
        values["request_fields"] = list(run.request_fields)
    return RunConfig.from_options(values)


def cells(result: RunOutcome) -> dict[str, dict[str, Any]]:
    """Per cell: verdict, error and notice (what the recordings keep and the tests compare)."""
    return {
        c.cell.id: {"verdict": str(c.verdict), "error": c.error, "notice": c.notice}
        for c in result.report.cells
    }


@dataclass
class Exchange:
    """One try of one batch as the server answered it."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the try failed before every request was written


class Killer(OpenAIEngine):
    """The openai backend that, once armed (``arm``), kills the server process when the request
    for one prompt arrives: SIGSTOP before the request is connected and written (so the server
    cannot read it, let alone answer), SIGKILL once it is written. The kernel then resets the
    unanswered connection and refuses later ones: a server that died mid-run, with no part
    in it for the prompt's content. ``killed`` says when (``generate_call``: 0-based, in the
    order of the run's batches) and how."""

    _victim: str | None = None
    _process: subprocess.Popen[bytes] | None = None
    _batches = 0
    killed: dict[str, Any] | None = None

    def arm(self, process: subprocess.Popen[bytes], prompt: str) -> Killer:
        self._process, self._victim = process, prompt
        return self

    def generate(self, prompts: Sequence[str], settings: Any) -> Any:
        self._batches += 1
        return super().generate(prompts, settings)

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        conn = super()._connection(timeout)
        if self._victim is None or self._process is None or self.killed is not None:
            return conn
        send, process = conn.request, self._process

        def request(method: str, url: str, body: Any = None, headers: Any = None, **kw: Any) -> None:
            hit = self.killed is None and body is not None and json.loads(body).get("prompt") == self._victim
            if hit:
                os.kill(process.pid, signal.SIGSTOP)
            try:
                send(method, url, body=body, headers=headers or {}, **kw)
            finally:
                if hit:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait(30)
                    self.killed = {
                        "signal": "SIGKILL",
                        "generate_call": self._batches - 1,
                        "returncode": process.returncode,
                        "how": "SIGSTOP before the request was connected and written, SIGKILL once it was",
                    }

        conn.request = request  # type: ignore[method-assign]
        return conn


class Recorder(Killer):
    """The openai backend (a ``Killer``, inert unless armed), keeping every try of every batch
    (``exchanges``)."""

    exchanges: list[Exchange]

    def _exchange(self, bodies: Sequence[dict[str, Any]]) -> list[Answer]:
        if not hasattr(self, "exchanges"):
            self.exchanges = []
        try:
            answers = super()._exchange(bodies)
        except OSError as exc:
            self.exchanges.append(Exchange(error=f"{type(exc).__name__}: {exc}"))
            raise
        self.exchanges.append(
            Exchange(requests=[_request(p, b, a) for p, (b, a) in enumerate(zip(bodies, answers))])
        )
        return answers


def _request(position: int, body: dict[str, Any], answer: Answer) -> dict[str, Any]:
    try:
        response: Any = json.loads(answer.body) if answer.body else None
    except ValueError:
        response = answer.body.decode("utf-8", "replace")
    if isinstance(response, dict):
        response = {k: v for k, v in response.items() if k not in ("id", "created", "system_fingerprint")}
    times = {
        k: (None if v is None else round(v, 4))
        for k, v in (
            ("t_send", answer.sent),
            ("t_written", answer.written),
            ("t_first_byte", answer.first_byte),
            ("t_finish", answer.finished),
        )
    }
    return {
        "position": position,
        "body": body,
        "status": answer.status,
        "response": response,
        "error": None if answer.error is None else type(answer.error).__name__,
        **times,
    }
