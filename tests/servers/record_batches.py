"""Sending batches to a server as the harness's openai backend sends them, and the recorded
form of what came back (tests/servers/record.py writes it; tests/servers/replay.py serves it).

A batch of requests is sent in position order: each request is connected and written before
the next one starts; each is read on a thread of its own, with ``t_send``/``t_written``/
``t_first_byte``/``t_finish`` in seconds from the batch's start.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Sequence
from statistics import median
from typing import Any

from tests.servers import llama_cpp

MAX_TOKENS = 64  # the greedy request sets' max_tokens


def _request(
    host: str,
    port: int,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    t0: float,
    rec: dict[str, Any],
    written: threading.Event,
) -> None:
    """One request on its own connection; fills ``rec`` with times, status and body."""
    conn = http.client.HTTPConnection(host, port, timeout=600)
    try:
        rec["t_send"] = time.monotonic() - t0
        payload = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, payload, {"Content-Type": "application/json"} if payload else {})
        rec["t_written"] = time.monotonic() - t0
        written.set()
        resp = conn.getresponse()
        rec["t_first_byte"] = time.monotonic() - t0
        raw = resp.read()
        rec["t_finish"] = time.monotonic() - t0
        rec["status"] = resp.status
        try:
            rec["response"] = json.loads(raw)
        except ValueError:
            rec["response"] = raw.decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        rec.setdefault("t_written", time.monotonic() - t0)
        rec["t_finish"] = time.monotonic() - t0
        rec["status"] = None
        rec["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        written.set()
        conn.close()


def send_batch(
    server: llama_cpp.Server, bodies: Sequence[dict[str, Any]], path: str = "/v1/completions"
) -> list[dict[str, Any]]:
    """All requests in flight at once, in position order (request i written before i+1)."""
    host, port = "127.0.0.1", int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    t0 = time.monotonic()
    recs: list[dict[str, Any]] = [{} for _ in bodies]
    threads = []
    for body, rec in zip(bodies, recs):
        written = threading.Event()
        t = threading.Thread(target=_request, args=(host, port, "POST", path, body, t0, rec, written))
        t.start()
        written.wait()
        threads.append(t)
    for t in threads:
        t.join()
    return recs


# Left out of recorded answers (they change on every run, or follow from what is kept): the
# first answer's values are kept once in server.json under "dropped_from_answers".
DROPPED = ("id", "created", "system_fingerprint")
DROPPED_TIMINGS = (
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_per_token_ms",
    "predicted_per_second",
)
dropped_sample: dict[str, Any] = {}


def trim(response: Any) -> Any:
    if not isinstance(response, dict):
        return response
    for k in DROPPED:
        if k in response:
            dropped_sample.setdefault(k, response[k])
    out = {k: v for k, v in response.items() if k not in DROPPED}
    if isinstance(out.get("timings"), dict):
        out["timings"] = {k: v for k, v in out["timings"].items() if k not in DROPPED_TIMINGS}
    return out


def rounded(rec: dict[str, Any]) -> dict[str, Any]:
    out = {k: (round(v, 4) if k.startswith("t_") else v) for k, v in rec.items()}
    if "response" in out:
        out["response"] = trim(out["response"])
    return out


def dumps(data: dict[str, Any]) -> str:
    """Indented JSON with each request on one line (small, and diffs line by line)."""

    def enc(v: Any, depth: int) -> str:
        if isinstance(v, dict) and ("position" in v or "case" in v):
            return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
        pad = " " * (depth + 1)
        if isinstance(v, dict) and v:
            items = [f"{pad}{json.dumps(k)}: {enc(x, depth + 1)}" for k, x in v.items()]
            return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            return "[\n" + ",\n".join(pad + enc(x, depth + 1) for x in v) + "\n" + " " * depth + "]"
        return json.dumps(v, ensure_ascii=False)

    return enc(data, 0) + "\n"


def run_set(
    server: llama_cpp.Server, prompts: list[tuple[str, str]], concurrency: int, extra: dict[str, Any]
) -> list[dict[str, Any]]:
    batches = []
    for b in range(0, len(prompts), concurrency):
        chunk = prompts[b : b + concurrency]
        bodies = [
            {
                "model": server.model,
                "prompt": text,
                "max_tokens": MAX_TOKENS,
                "temperature": 0.0,
                "n": 1,
                **extra,
            }
            for _, text in chunk
        ]  # the harness's body, then extra fields
        recs = send_batch(server, bodies)
        requests = []
        for position, ((pid, _), body, rec) in enumerate(zip(chunk, bodies, recs)):
            requests.append(
                {
                    "position": position,
                    "prompt_id": pid,
                    "body": {**body, "prompt": {"$prompt": pid}},
                    **rounded(rec),
                }
            )
        batches.append({"batch": b // concurrency, "requests": requests})
    return batches


def texts(batches: list[dict[str, Any]]) -> dict[str, list[str]]:
    out = {}
    for batch in batches:
        for r in batch["requests"]:
            resp = r.get("response")
            if isinstance(resp, dict):
                out[r["prompt_id"]] = [c.get("text") for c in resp.get("choices", [])]
    return out


def overlap(batches: list[dict[str, Any]], alone: list[dict[str, Any]]) -> dict[str, Any]:
    """How the requests of each batch shared the server's time, against the same prompts
    sent one at a time (``alone``: the concurrency-1 set with the same fields).

    A server that answers one request at a time finishes them one after another, each about
    its own time alone after the previous one ("staggered"; finish spread about 3/4 of the
    batch's span). A server that runs them together finishes them close together, whatever
    its throughput.
    """
    latency = {r["prompt_id"]: r["t_finish"] - r["t_send"] for b in alone for r in b["requests"]}
    spans, spread_ratio, sum_ratio, staggered = [], [], [], 0
    for batch in batches:
        reqs = sorted(batch["requests"], key=lambda r: r["t_finish"])
        if len(reqs) < 2:
            continue
        span = reqs[-1]["t_finish"] - min(r["t_send"] for r in reqs)
        spans.append(span)
        spread_ratio.append((reqs[-1]["t_finish"] - reqs[0]["t_finish"]) / span)
        sum_ratio.append(span / sum(latency[r["prompt_id"]] for r in reqs))
        staggered += all(
            b["t_finish"] - a["t_finish"] >= 0.5 * latency[b["prompt_id"]] for a, b in zip(reqs, reqs[1:])
        )
    return {
        "batches": len(spans),
        "median_span_s": round(median(spans), 3),
        "median_finish_spread_over_span": round(median(spread_ratio), 2),
        "staggered_batches": staggered,
        "median_span_over_sum_alone": round(median(sum_ratio), 2),
        "note": "span: first send to last finish; finish spread: first to last finish; "
        "staggered: each answer came at least half its time alone after the one "
        "before; sum alone: the same prompts' latencies at concurrency 1 added up",
    }


def server_timings(batches: list[dict[str, Any]]) -> dict[str, Any] | None:
    """llama-server's own per-request generation time (``timings.predicted_ms``), median."""
    ms = [
        r["response"]["timings"]["predicted_ms"]
        for b in batches
        for r in b["requests"]
        if isinstance(r.get("response"), dict) and "timings" in r["response"]
    ]
    return {"median_predicted_ms": round(median(ms), 1)} if ms else None


def get(server: llama_cpp.Server, path: str) -> dict[str, Any]:
    conn = http.client.HTTPConnection(
        "127.0.0.1", int(server.base_url.rsplit(":", 1)[1].split("/")[0]), timeout=30
    )
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        return {"method": "GET", "path": path, "status": resp.status, "response": body}
    finally:
        conn.close()
