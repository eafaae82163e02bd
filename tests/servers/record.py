"""Record real answers of llama-server and llama-cpp-python as test fixtures.

    python -m tests.servers.record [--kind llama-server|llama-cpp-python] [--out tests/data/servers]

Needs ``python -m tests.servers.llama_cpp build`` first. Converts the bundled model (cached by
content), starts each server (``--parallel 4`` for llama-server; llama-cpp-python has no
such setting) and writes, under ``OUT/<kind>/``:

* ``server.json``: how it was started, its version, ``GET /v1/models``, and a summary of what
  the recordings show (outputs that differ with and without ``repeat_penalty: 1.0``, the
  number of choices for ``n: 2``, how much the 4 requests of a batch overlapped);
* one file per request set, each a list of batches; every request has its body (the prompt
  as ``{"$prompt": ID}``, the text being in ``OUT/prompts.json``), HTTP status, response
  body, and ``t_send``/``t_written``/``t_first_byte``/``t_finish`` in seconds from the batch's
  start. A batch of 4 is sent as the harness's openai backend sends one: each request is
  connected and written before the next one starts; each is read on a thread of its own.

Request sets: greedy (``temperature`` 0, ``max_tokens`` 64) for the 64 bundled prompts at
concurrency 1 and 4, each with the server's default repeat penalty and with
``repeat_penalty: 1.0``; the harness's beam-2 body (``use_beam_search``, ``n: 2``,
``best_of: 2``, ``length_penalty``, ``early_stopping``) for 8 prompts at concurrency 4;
errors (a wrongly typed field, an unknown model name, a prompt longer than the context,
and last a character outside the bundled vocabulary's alphabet, which may bring the server
down).

Then the harness's own runs (``harness_runs.RUNS``: the openai backend through the whole
pipeline, grid 1,2,4 x 1,2 with and without ``repeat_penalty: 1.0``, a run in which the
recorder kills the server (SIGKILL) when one prompt's request arrives, and one with a prompt
longer than the context), each on a freshly started server, every try of every batch
kept with its timings: ``OUT/<kind>/harness-*.json``, with each cell's verdict, error and
notice. ``tests/servers/replay.py`` serves them again for the tests that run without the build.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any

from tests.servers import harness_runs, llama_cpp
from tests.servers.record_batches import (
    DROPPED,
    DROPPED_TIMINGS,
    MAX_TOKENS,
    dropped_sample,
    dumps,
    get,
    overlap,
    rounded,
    run_set,
    send_batch,
    server_timings,
    texts,
)
from tests.servers.verify_tokenizer import bundled_prompts

OUT = llama_cpp.REPO / "tests" / "data" / "servers"
BEAM_PROMPTS = 8
PROBE_PROMPTS = 8
PROBE_TOKENS = 256


def transformers_greedy(model_dir: Path, prompts: list[tuple[str, str]]) -> dict[str, str]:
    """transformers' greedy continuation of each prompt (the harness's reference), stripped."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    out = {}
    with torch.inference_mode():
        for pid, text in prompts:
            ids = tok(text, return_tensors="pt")["input_ids"]
            gen = model.generate(
                ids, max_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=tok.pad_token_id
            )
            decoded = tok.decode(gen[0, ids.shape[1] :], skip_special_tokens=True)
            assert isinstance(decoded, str)  # one sequence decodes to one string
            out[pid] = decoded.strip()
    return out


def _relative(cmd: list[str], lay: llama_cpp.Layout) -> list[str]:
    return [c.replace(str(lay.root), "$CACHE") for c in cmd]


def _version(kind: llama_cpp.Kind, lay: llama_cpp.Layout) -> str:
    if kind == "llama-server":
        p = subprocess.run([str(lay.server_bin), "--version"], capture_output=True, text=True, timeout=30)
        return next((line for line in (p.stdout + p.stderr).splitlines() if line.startswith("version:")), "")
    return f"llama-cpp-python {llama_cpp.LLAMA_CPP_PYTHON_VERSION}"


def record(
    kind: llama_cpp.Kind,
    out: Path,
    cache: Path | None,
    model_dir: Path,
    reference: dict[str, str] | None = None,
) -> dict[str, Any]:
    lay = llama_cpp.layout(cache)
    gguf = llama_cpp.convert(model_dir, cache)
    prompts = bundled_prompts()
    dest = out / kind
    dest.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}

    def save(name: str, data: Any) -> None:
        (dest / f"{name}.json").write_text(dumps(data), encoding="utf-8")

    dropped_sample.clear()
    t_start = time.monotonic()
    with llama_cpp.start(kind, gguf, 4, cache=cache) as server:
        models = get(server, "/v1/models")
        sets: dict[str, list[dict[str, Any]]] = {}
        for name, conc, extra in [
            ("greedy-c1", 1, {}),
            ("greedy-c4", 4, {}),
            ("greedy-rp1-c1", 1, {"repeat_penalty": 1.0}),
            ("greedy-rp1-c4", 4, {"repeat_penalty": 1.0}),
        ]:
            t = time.monotonic()
            sets[name] = run_set(server, prompts, conc, extra)
            print(f"[{kind}] {name}: {time.monotonic() - t:.1f} s", file=sys.stderr, flush=True)
            save(
                name,
                {
                    "server": kind,
                    "set": name,
                    "concurrency": conc,
                    "extra_fields": extra,
                    "batches": sets[name],
                },
            )
        beam = {"use_beam_search": True, "n": 2, "best_of": 2, "length_penalty": 1.0, "early_stopping": True}
        for name, extra in [("beam2-c4", beam), ("beam2-rp1-c4", {**beam, "repeat_penalty": 1.0})]:
            sets[name] = run_set(server, prompts[:BEAM_PROMPTS], 4, extra)
            save(
                name,
                {"server": kind, "set": name, "concurrency": 4, "extra_fields": extra, "batches": sets[name]},
            )
        # long generations (EOS banned, 256 tokens) make the overlap plain: one request at a
        # time takes about 4x one request's time for 4, a batching server about 1x-2x
        eos = json.loads((model_dir / "config.json").read_text())["eos_token_id"]
        probe = {"max_tokens": PROBE_TOKENS, "logit_bias": {str(eos): -100}, "repeat_penalty": 1.0}
        sets["overlap-probe-c1"] = run_set(server, prompts[:PROBE_PROMPTS], 1, probe)
        sets["overlap-probe-c4"] = run_set(server, prompts[:PROBE_PROMPTS], 4, probe)
        save(
            "overlap-probe",
            {
                "server": kind,
                "set": "overlap-probe",
                "extra_fields": probe,
                "alone": sets["overlap-probe-c1"],
                "batches": sets["overlap-probe-c4"],
            },
        )
        pid, text = prompts[0]
        base = {"model": server.model, "prompt": text, "max_tokens": MAX_TOKENS, "temperature": 0.0, "n": 1}
        cases: list[tuple[str, dict[str, Any]]] = [
            ("max_tokens of the wrong type", {**base, "max_tokens": "many"}),
            ("unknown model name", {**base, "model": "does-not-exist"}),
            ("prompt longer than the context (512 tokens a slot)", {**base, "prompt": text * 4}),
            ("character outside the vocabulary's alphabet", {**base, "prompt": "Prices rose 5% TL;DR: "}),
        ]
        errors = []
        for what, body in cases:
            [rec] = send_batch(server, [body])
            shown = (
                {**body, "prompt": {"$prompt": pid, "repeat": 4}}
                if body["prompt"] == text * 4
                else ({**body, "prompt": {"$prompt": pid}} if body["prompt"] == text else body)
            )
            time.sleep(0.5)
            errors.append({"case": what, "body": shown, **rounded(rec), "server_alive_after": server.alive()})
            print(
                f"[{kind}] error case {what!r}: HTTP {rec.get('status')} alive={server.alive()}",
                file=sys.stderr,
            )
            if not server.alive():
                break
        save("errors", {"server": kind, "cases": errors})
        props = get(server, "/props") if kind == "llama-server" and server.alive() else None
        command = _relative(server.command, lay)
    stopped_rc = server.process.returncode

    c1, rp = texts(sets["greedy-c1"]), texts(sets["greedy-rp1-c1"])
    c4, rp4 = texts(sets["greedy-c4"]), texts(sets["greedy-rp1-c4"])
    lat = [r["t_finish"] - r["t_send"] for b in sets["greedy-c1"] for r in b["requests"]]
    summary = {
        "outputs_differing_default_vs_repeat_penalty_1": sum(c1[k] != rp[k] for k in c1),
        "outputs_differing_c1_vs_c4": sum(c1[k] != c4[k] for k in c1),
        "outputs_differing_c1_vs_c4_repeat_penalty_1": sum(rp[k] != rp4[k] for k in rp),
        "beam2_choices_per_answer": sorted({len(v) for v in texts(sets["beam2-c4"]).values()}),
        "beam2_choice_texts_identical": sum(len(set(v)) == 1 for v in texts(sets["beam2-c4"]).values()),
        "beam2_choice0_equal_greedy": sum(v[0] == c1[k][0] for k, v in texts(sets["beam2-c4"]).items()),
        "beam2_rp1_choice0_equal_greedy_rp1": sum(
            v[0] == rp[k][0] for k, v in texts(sets["beam2-rp1-c4"]).items()
        ),
        "c1_mean_latency_s": round(mean(lat), 3),
        "c4_overlap": overlap(sets["greedy-c4"], sets["greedy-c1"]),
        "c4_rp1_overlap": overlap(sets["greedy-rp1-c4"], sets["greedy-rp1-c1"]),
        "probe_256_tokens_overlap": overlap(sets["overlap-probe-c4"], sets["overlap-probe-c1"]),
        "server_side_c1": server_timings(sets["greedy-c1"]),
        "server_side_c4": server_timings(sets["greedy-c4"]),
    }
    if reference is not None:
        for name in ("greedy-c1", "greedy-rp1-c1", "greedy-c4", "greedy-rp1-c4"):
            got = texts(sets[name])
            summary[f"{name}_equal_transformers_greedy"] = sum(
                (got[k][0] or "").strip() == reference[k] for k in got
            )
    meta = {
        "server": kind,
        "version": _version(kind, lay),
        "command": command,
        "parallel_requested": 4,
        "gguf": gguf.name,
        "model_digest": llama_cpp.model_digest(model_dir),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "recorded_wall_s": round(time.monotonic() - t_start, 1),
        "exit_code_after_stop": stopped_rc,
        "models": models,
        "dropped_from_answers": {
            "fields": [*DROPPED, *(f"timings.{k}" for k in DROPPED_TIMINGS)],
            "first_values": dict(dropped_sample),
        },
        "summary": summary,
    }
    if props is not None:  # what a replay needs of /props: its default sampling settings
        props_body = props.get("response")
        if isinstance(props_body, dict):
            gs = props_body.get("default_generation_settings", {})
            keep = {
                k: gs.get("params", gs).get(k)
                for k in (
                    "repeat_penalty",
                    "repeat_last_n",
                    "n_predict",
                    "temperature",
                    "top_k",
                    "top_p",
                    "min_p",
                )
            }
            meta["props"] = {
                "status": props["status"],
                "total_slots": props_body.get("total_slots"),
                "n_ctx": gs.get("n_ctx"),
                "default_params": keep,
                "build_info": props_body.get("build_info"),
            }
    save("server", meta)
    print(json.dumps({kind: summary}, indent=1), file=sys.stderr)
    return summary


def _stored_body(body: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    prompt = body.get("prompt")
    return {**body, "prompt": {"$prompt": ids[prompt]}} if prompt in ids else body


def record_harness_run(
    kind: llama_cpp.Kind,
    name: str,
    out: Path,
    cache: Path | None,
    gguf: Path,
    model_dir: Path = llama_cpp.BUNDLED_MODEL,
) -> dict[str, Any]:
    """One of ``harness_runs.RUNS`` through a freshly started server, every try of every
    batch kept; written to OUT/<kind>/<name>.json. The per-cell outcome (verdict, error,
    notice) is kept too: the replay test must reproduce it."""
    import tempfile

    from harness.pipeline import RunOutcome
    from harness.pipeline import run as run_pipeline

    run = harness_runs.RUNS[name]
    ids = {text: pid for pid, text in bundled_prompts()}
    with tempfile.TemporaryDirectory() as tmp, llama_cpp.start(kind, gguf, 4, cache=cache) as server:
        config = harness_runs.config(run, server.base_url, Path(tmp))
        engine = harness_runs.Recorder(
            server.base_url,
            request_timeout=config.engine_options.request_timeout,
            retries=config.engine_options.retries,
        )
        if run.fault == "kill":
            engine.arm(server.process, dict(bundled_prompts())[harness_runs.fault_id()])
        t0 = time.monotonic()
        result = run_pipeline(config, engine=engine)
        assert isinstance(result, RunOutcome)  # one process: rank 0
        seconds = round(time.monotonic() - t0, 1)
        alive = server.alive()
    cells = {
        cid: {k: (v.replace(server.base_url, "$SERVER") if isinstance(v, str) else v) for k, v in c.items()}
        for cid, c in harness_runs.cells(result).items()
    }
    batches = [
        {
            "batch": i,
            "error": ex.error,
            "requests": [{**r, "body": _stored_body(r["body"], ids)} for r in ex.requests],
        }
        for i, ex in enumerate(engine.exchanges)
    ]
    data = {
        "server": kind,
        "set": name,
        "run": dataclasses.asdict(run),
        "model_digest": llama_cpp.model_digest(model_dir),
        "seconds": seconds,
        "server_alive_after": alive,
        "killed": engine.killed,
        "cells": cells,
        "batches": batches,
    }
    (out / kind / f"{name}.json").write_text(dumps(data), encoding="utf-8")
    print(
        f"[{kind}] {name}: {seconds} s, " + ", ".join(f"{k} {c['verdict']}" for k, c in cells.items()),
        file=sys.stderr,
        flush=True,
    )
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=llama_cpp.KINDS, action="append")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--model-dir", type=Path, default=llama_cpp.BUNDLED_MODEL)
    parser.add_argument(
        "--no-reference", action="store_true", help="skip the comparison with transformers' greedy outputs"
    )
    parser.add_argument(
        "--harness-only", action="store_true", help="record only the harness's own runs (harness_runs.RUNS)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    prompts = bundled_prompts()
    (args.out / "prompts.json").write_text(
        json.dumps(
            {
                "template": "{text} TL;DR: ",
                "source": "harness/bundled/news.jsonl",
                "model_digest": llama_cpp.model_digest(args.model_dir),
                "prompts": dict(prompts),
            },
            indent=1,
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    reference = None if args.no_reference else transformers_greedy(args.model_dir, prompts)
    for kind in args.kind or llama_cpp.KINDS:
        if not args.harness_only:
            record(kind, args.out, args.cache, args.model_dir, reference)
        gguf = llama_cpp.convert(args.model_dir, args.cache)
        for name in harness_runs.RUNS:
            record_harness_run(kind, name, args.out, args.cache, gguf, args.model_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
