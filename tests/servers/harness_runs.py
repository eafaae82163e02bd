"""The harness's own runs through a real server: what ``record.py`` records (every request and
answer, timed) and what the replay and live tests in
tests/integration/test_llama_cpp_servers.py run again.

Each run is the openai backend through the whole pipeline (``harness.pipeline.run``) over the
first ``PROMPTS`` bundled documents, 64 new tokens:

* ``harness-grid``: batch sizes 1, 2, 4 x beam widths 1, 2, the server's own sampling defaults;
* ``harness-grid-rp1``: the same with ``--request-field repeat_penalty=1.0``;
* ``harness-crash``: batch sizes 1, 2, 4 at beam width 1, one document carrying a ``%`` (outside
  the bundled vocabulary's alphabet: llama-cpp-python dies on it, llama-server answers 400).

``Recorder`` is the openai backend with every try of every batch kept (bodies, statuses,
answers, timings), for ``record.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.engines.http_batch import Answer
from harness.engines.openai import OpenAIEngine
from harness.inputs.data import load_dataset

PROMPTS = 8
MAX_NEW_TOKENS = 64
CRASH_DOCUMENT = 2  # index of the document that carries the '%'
CRASH_TEXT = " Prices rose 5% in a year."


@dataclass(frozen=True)
class HarnessRun:
    name: str
    batch_sizes: tuple[int, ...]
    beam_widths: tuple[int, ...]
    request_fields: tuple[str, ...] = ()
    crash: bool = False


RUNS: dict[str, HarnessRun] = {r.name: r for r in (
    HarnessRun("harness-grid", (1, 2, 4), (1, 2)),
    HarnessRun("harness-grid-rp1", (1, 2, 4), (1, 2), ("repeat_penalty=1.0",)),
    HarnessRun("harness-crash", (1, 2, 4), (1,), crash=True),
)}


def dataset(folder: Path, crash: bool = False) -> Path:
    """The first PROMPTS bundled documents as a JSONL file (one with a '%' when ``crash``)."""
    docs = load_dataset(None).documents[:PROMPTS]
    path = folder / ("crash.jsonl" if crash else "grid.jsonl")
    rows = [{"id": d.id, "text": d.text + (CRASH_TEXT if crash and i == CRASH_DOCUMENT else ""),
             "summary": d.summary} for i, d in enumerate(docs)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def config(run: HarnessRun, url: str, folder: Path) -> RunConfig:
    """The run's options, as `pytest suites/ --engine URL ...` would give them."""
    folder.mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {
        "engine": url, "dataset": str(dataset(folder, run.crash)),
        "batch_sizes": run.batch_sizes, "beam_widths": run.beam_widths,
        "max_new_tokens": MAX_NEW_TOKENS, "report_dir": str(folder / "reports"),
        "no_cache": True, "retries": 1}
    if run.request_fields:
        values["request_fields"] = list(run.request_fields)
    return RunConfig.from_options(values)


def cells(result: Any) -> dict[str, dict[str, Any]]:
    """Per cell: verdict, error and notice (what the recordings keep and the tests compare)."""
    return {c.cell.id: {"verdict": str(c.verdict), "error": c.error, "notice": c.notice}
            for c in result.cells}


@dataclass
class Exchange:
    """One try of one batch as the server answered it."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the try failed before every request was written


class Recorder(OpenAIEngine):
    """The openai backend, keeping every try of every batch (``exchanges``)."""

    exchanges: list[Exchange]

    def _exchange(self, bodies: Sequence[dict[str, Any]]) -> list[Answer]:
        if not hasattr(self, "exchanges"):
            self.exchanges = []
        try:
            answers = super()._exchange(bodies)
        except OSError as exc:
            self.exchanges.append(Exchange(error=f"{type(exc).__name__}: {exc}"))
            raise
        self.exchanges.append(Exchange(requests=[_request(p, b, a) for p, (b, a) in
                                                 enumerate(zip(bodies, answers))]))
        return answers


def _request(position: int, body: dict[str, Any], answer: Answer) -> dict[str, Any]:
    try:
        response: Any = json.loads(answer.body) if answer.body else None
    except ValueError:
        response = answer.body.decode("utf-8", "replace")
    if isinstance(response, dict):
        response = {k: v for k, v in response.items() if k not in ("id", "created", "system_fingerprint")}
    times = {k: (None if v is None else round(v, 4)) for k, v in (
        ("t_send", answer.sent), ("t_written", answer.written),
        ("t_first_byte", answer.first_byte), ("t_finish", answer.finished))}
    return {"position": position, "body": body, "status": answer.status, "response": response,
            "error": None if answer.error is None else type(answer.error).__name__, **times}
