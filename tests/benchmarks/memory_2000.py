"""Benchmark: peak memory of a run over the default grid as the number of prompts grows.

    python tests/benchmarks/memory_2000.py [--prompts 2000] [--max-new-tokens 64]
        [--engine bundled|echo] [--trace] [--json FILE]

Generates a seeded dataset of ``--prompts`` news-like documents
(``harness.bundled.synthetic.generate``), runs the default grid (batch sizes 1,2,4,8 x
beam widths 1,2,4: 45 generations per prompt) with the generation cache off, and prints:

- ``rss_after_prepare``: peak RSS once the dataset and the engine are loaded (before any
  generation);
- ``peak_rss``: peak RSS of the whole run (``resource.getrusage``, the figure the issue asks
  for); the difference is what generating, scoring and reporting added;
- with ``--trace``, ``heap_peak`` and ``heap_retained``: the peak of Python allocations during
  generation, scoring and report writing (``tracemalloc``, started after loading; tensors
  are not Python allocations, so this is the harness's own data), and what the finished
  run still holds. ``--trace`` slows the run down.

``--engine echo`` swaps the model for an engine that echoes the prompt's first 40 words: no
model time, so the harness's own memory can be measured at 2,000 prompts in a minute.
The bundled engine at 2,000 prompts takes about 35 minutes at ``--max-new-tokens 8`` on one
idle CPU core (several times that at 64); run it alone, as other jobs on the machine slow it
down several-fold. Figures in docs/performance.md, "Memory".
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness.bundled.synthetic import generate  # noqa: E402
from harness.config import DatasetOptions, DecodingSettings, RunConfig  # noqa: E402
from harness.pipeline import (  # noqa: E402
    RunOutcome,  # noqa: E402
    execute,
    prepare,
)

if TYPE_CHECKING:
    from harness.engines.base import Generation

MIB = 1024 * 1024


class EchoEngine:
    """Echoes the first 40 words of each prompt: a model-free engine for the harness's memory."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        from harness.engines.base import Generation

        return [Generation(text=" ".join(p.split()[:40])) for p in prompts]


def peak_rss_bytes() -> int:
    """ru_maxrss of this process (kilobytes on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--engine", choices=("bundled", "echo"), default="bundled")
    parser.add_argument("--trace", action="store_true", help="also measure Python allocations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="append the figures to FILE")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="memory-bench-") as tmp:
        data = Path(tmp) / f"synthetic-{args.prompts}.jsonl"
        data.write_text(
            "".join(
                json.dumps({"id": e.id, "text": e.text, "summary": e.summary}) + "\n"
                for e in generate(args.prompts, args.seed, prefix="bench")
            ),
            encoding="utf-8",
        )
        config = RunConfig(
            data=DatasetOptions(dataset=str(data)),
            max_new_tokens=args.max_new_tokens,
            report_dir=Path(tmp) / "reports",
            no_cache=True,
            goldens_dir=Path(tmp) / "goldens",
        )
        t0 = time.perf_counter()
        echo = EchoEngine(None) if args.engine == "echo" else None
        # prepare adopts any object with generate (harness.engines.registry.adopt)
        prep = prepare(config, engine=echo)
        after_prepare = peak_rss_bytes()
        if args.trace:
            tracemalloc.start()
        t1 = time.perf_counter()
        result = execute(prep)
        seconds = time.perf_counter() - t1
        assert isinstance(result, RunOutcome)  # one process: rank 0
        figures: dict[str, object] = {
            "engine": args.engine,
            "prompts": args.prompts,
            "max_new_tokens": args.max_new_tokens,
            "generations": result.report.method.sequences,
            "verdict": result.report.verdict,
            "execute_s": round(seconds, 1),
            "prepare_s": round(t1 - t0, 1),
            "rss_after_prepare_mib": round(after_prepare / MIB, 1),
            "peak_rss_mib": round(peak_rss_bytes() / MIB, 1),
            "generations_jsonl_mib": round((result.folder / "generations.jsonl").stat().st_size / MIB, 2),
        }
        if args.trace:
            current, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            figures.update(heap_peak_mib=round(peak / MIB, 2), heap_retained_mib=round(current / MIB, 2))
        del result
    print(" ".join(f"{k}={v}" for k, v in figures.items()), flush=True)
    if args.json:
        with args.json.open("a", encoding="utf-8") as f:
            f.write(json.dumps(figures) + "\n")
    return figures


if __name__ == "__main__":
    main()
