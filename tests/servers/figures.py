"""The bundled engine through both real servers, as a user runs the harness: the figures in
docs/engines.md ("Real servers: llama.cpp") and the README.

    python -m tests.servers.figures [--out tests/data/servers/figures.json] [--cache DIR]

Needs ``python -m tests.servers.llama_cpp build``. For each server (llama-server
``--parallel 4``, llama-cpp-python), freshly started with the bundled model (GGUF), runs
``pytest suites/ --engine http://127.0.0.1:PORT/v1 --batch-sizes 1,2,4 --beam-widths 1,2``
over the 64 bundled prompts, with the server's defaults and with
``--request-field repeat_penalty=1.0``, and keeps per cell the verdict and its one-line
reason, the pytest outcome, and the wall time. Writes them as JSON and prints the Markdown
table the docs carry. About 2 minutes on 2 cores when they are free.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.servers import llama_cpp

GRID = ("--batch-sizes", "1,2,4", "--beam-widths", "1,2")
VARIANTS = {"defaults": (), "repeat_penalty=1.0": ("--request-field", "repeat_penalty=1.0")}
OUT = llama_cpp.REPO / "tests" / "data" / "servers" / "figures.json"


def _reason(cell: dict[str, Any]) -> str:
    """The short reason of a cell's verdict, for the table."""
    text = cell.get("error") or cell.get("notice") or ""
    if "no beam search ran" in text:
        m = re.search(r"returned (.+?) for best_of", text)
        return f"no beam search ({m.group(1) if m else 'see report'})"
    if "one after another" in text:
        m = re.search(r"\((\d+) of the (\d+) batches its timing could judge, of (\d+)", text)
        return (
            (
                f"not batched ({m.group(1)} of the {m.group(2)} judged batches, of {m.group(3)}, "
                "one after another)"
            )
            if m
            else "not batched"
        )
    return text[:80]


def run_one(kind: llama_cpp.Kind, variant: str, gguf: Path, cache: Path | None) -> dict[str, Any]:
    """One `pytest suites/` run through a freshly started server."""
    with tempfile.TemporaryDirectory() as tmp, llama_cpp.start(kind, gguf, 4, cache=cache) as server:
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(llama_cpp.REPO / "suites"),
                "-p",
                "no:cacheprovider",
                "--engine",
                server.base_url,
                *GRID,
                *VARIANTS[variant],
                "--report-dir",
                tmp,
                "-q",
            ],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        wall = time.monotonic() - t0
        [path] = list(Path(tmp).glob("*/report.json"))
        report = json.loads(path.read_text(encoding="utf-8"))
    summary = next(
        (
            line
            for line in proc.stdout.splitlines()[::-1]
            if " in " in line and ("passed" in line or "failed" in line)
        ),
        "",
    ).strip("= ")
    cells = [
        {
            "cell": c["id"],
            "verdict": c["verdict"],
            "reason": _reason(c),
            "message": (c.get("error") or c.get("notice") or "").replace(server.base_url, "$SERVER"),
        }
        for c in report["cells"]
    ]
    return {
        "server": kind,
        "variant": variant,
        "exit_code": proc.returncode,
        "pytest": summary,
        "wall_s": round(wall, 1),
        "generate_s": report["timing"]["engine_generate_s"],
        "verdict": report["verdict"],
        "cells": cells,
    }


def _entry(cell: dict[str, Any]) -> str:
    verdict: str = cell["verdict"]
    return verdict + (f": {cell['reason']}" if cell["reason"] else "")


def table(runs: list[dict[str, Any]]) -> str:
    """The Markdown table: a row per cell, a column per server; a cell's entry is its verdict
    and reason with the server's defaults, and with repeat_penalty=1.0 where that differs."""
    kinds = list(dict.fromkeys(r["server"] for r in runs))
    by = {(r["server"], r["variant"]): r for r in runs}
    base, other = list(VARIANTS)[0], list(VARIANTS)[1]
    lines = ["| cell | " + " | ".join(f"`{k}`" for k in kinds) + " |", "|---|" + "---|" * len(kinds)]
    for i, cell in enumerate(by[(kinds[0], base)]["cells"]):
        row = []
        for k in kinds:
            a, b = by[(k, base)]["cells"][i], by[(k, other)]["cells"][i]
            row.append(
                _entry(a)
                if _entry(a) == _entry(b) or a["verdict"] == b["verdict"]
                else f"{_entry(a)}; with {other}: {_entry(b)}"
            )
        lines.append(f"| {cell['cell']} | " + " | ".join(row) + " |")
    for variant in VARIANTS:
        lines.append(
            f"| run, {variant} | "
            + " | ".join(
                f"{by[(k, variant)]['verdict']} (exit {by[(k, variant)]['exit_code']}): "
                f"{by[(k, variant)]['pytest']}; {by[(k, variant)]['wall_s']:.0f} s, "
                f"{by[(k, variant)]['generate_s']:.0f} s generating"
                for k in kinds
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args(argv)
    if (reason := llama_cpp.available("llama-cpp-python", args.cache)) is not None:
        print(reason, file=sys.stderr)
        return 2
    gguf = llama_cpp.convert(llama_cpp.BUNDLED_MODEL, args.cache)
    runs = []
    for kind in llama_cpp.KINDS:
        for variant in VARIANTS:
            runs.append(run_one(kind, variant, gguf, args.cache))
            print(
                f"[{kind}, {variant}] {runs[-1]['pytest']} ({runs[-1]['wall_s']} s)",
                file=sys.stderr,
                flush=True,
            )
    args.out.write_text(
        json.dumps(
            {
                "model_digest": llama_cpp.model_digest(llama_cpp.BUNDLED_MODEL),
                "grid": " ".join(GRID),
                "runs": runs,
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
