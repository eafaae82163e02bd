"""Engine throughput per cell: sequences/s and generated tokens/s, with pytest-benchmark.

Off unless asked for (see suites/conftest.py). Each cell's rotation batches (the same
batches the quality run sends) are timed one engine call per round, in pedantic mode, after
one warm-up call. ``extra_info`` carries the cell, the rates and the engine fingerprint,
so saved runs (``--benchmark-autosave``) compare like with like and
``--benchmark-compare-fail`` turns a slowdown into a failing exit.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from harness.storage.cache import engine_fingerprint

if TYPE_CHECKING:
    from harness.engines.base import Engine, Generation
    from harness.model.cell import Cell
    from harness.stages.run import Prepared

pytestmark = pytest.mark.throughput


def _generated_tokens(engine: Engine, gens: Sequence[Generation]) -> int | None:
    """Tokens of the returned (best-beam) outputs: the engine's ids, else recounted."""
    if all(g.token_ids for g in gens):
        return sum(len(g.token_ids) for g in gens)
    counter = getattr(engine, "count_tokens", None)
    return sum(counter([g.text for g in gens])) if callable(counter) else None


# benchmark: pytest-benchmark's BenchmarkFixture, whose methods carry no annotations
def test_throughput(
    benchmark: Any, harness_cell: Cell, harness_prepared: Prepared, harness_engine: Engine
) -> None:
    prep, engine, cell = harness_prepared, harness_engine, harness_cell
    settings = prep.config.decoding(cell.beam_width)
    batches = [[prep.prompts[d] for d in b.documents] for b in prep.plan.batches(cell)]
    feed = itertools.cycle(batches)
    calls: list[tuple[int, int | None]] = []  # (sequences, generated tokens) per engine call

    def next_batch() -> tuple[tuple[list[str]], dict[str, object]]:
        return (next(feed),), {}

    def generate(prompts: list[str]) -> None:
        gens = engine.generate(prompts, settings)
        assert len(gens) == len(prompts), (
            f"{cell.id}: the engine returned {len(gens)} outputs for a batch of {len(prompts)}"
        )
        calls.append((len(prompts), _generated_tokens(engine, gens)))

    warmup = 1
    benchmark.group = "throughput"
    benchmark.pedantic(generate, setup=next_batch, rounds=len(batches), warmup_rounds=warmup, iterations=1)
    measured = calls[warmup : warmup + len(batches)]
    seconds = benchmark.stats.stats.total
    sequences = sum(n for n, _ in measured)
    known = [t for _, t in measured if t is not None]
    tokens = sum(known) if len(known) == len(measured) else None
    info = engine.info
    benchmark.extra_info.update(
        {
            "cell": cell.id,
            "batch_size": cell.batch_size,
            "beam_width": cell.beam_width,
            "max_new_tokens": settings.max_new_tokens,
            "batches": len(measured),
            "sequences": sequences,
            "generated_tokens": tokens,
            "sequences_per_s": round(sequences / seconds, 3),
            "tokens_per_s": round(tokens / seconds, 3) if tokens is not None else None,
            "engine": info.path,
            "backend": info.backend,
            "identity": info.identity,
            "engine_fingerprint": engine_fingerprint(info),
            "dataset": prep.dataset.info.name,
            "dataset_hash": prep.dataset.info.hash,
        }
    )
