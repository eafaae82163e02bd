"""Benchmark: the emulator's benign drift, measured as the harness runs it.

    python tests/benchmarks/drift_quality.py [--rates 0.1,0.3,0.6] [--beam-widths 1,2]
                                             [--batch-sizes 2,4,8] [--seed 0] [--truncate]

For every drift rate an emulator engine is built from the bundled model (``--drift RATE``)
and run over the bundled dataset (64 prompts, max_new_tokens 64) in the harness's full
rotation: every prompt at every position of every batch size, in the seeded ring order of
``harness.plan.make_plan``. Printed per cell: the share of outputs that differ from batch size
1 (against the rate asked for), the mean ROUGE-L against the reference summaries at batch
size 1 and at that batch size, and their difference (the issue's target: within +-0.01), and
where the outputs first differ (the first differing word, as a share of the batch-size-1
output's words: median and 10th-90th percentiles). Then the per-position mean against the
references for the last rate at the largest batch size. ``--truncate`` adds the truncate
fault (uniform damage) on top of the last rate, so the damage a verdict must see is on the
same page. ``--gaps`` prints instead how wide the near-ties of the bundled model are and what
taking the runner-up does to quality, by gap (what ``margin`` is chosen from).
``--neutrality N`` asks whether a flip is quality-neutral in expectation, on N prompts
generated afresh (seed ``--seed``) rather than the bundled 64: every output flips (rate 1)
in batches of two, and the mean change against the references is printed per beam width
with its standard error and its spread over blocks of 64 prompts (how far the bundled set's
64 references alone can move the figure).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from harness.config import DecodingSettings
from harness.config.basics import DEFAULT_PROMPT_TEMPLATE
from harness.engines.emulator.build import build_engine, build_limits
from harness.engines.emulator.drift import Drift
from harness.engines.emulator.engine import EmulatorEngine
from harness.engines.emulator.faults import Fault, FaultKind
from harness.inputs.data import build_prompt, load_dataset
from harness.model.cell import Cell
from harness.model.dataset import Document
from harness.plan import make_plan
from harness.verdict.scoring import rouge_l

_N = TypeVar("_N", int, float)


@dataclass(frozen=True)
class CellResult:
    """One cell of one engine: outputs[position][document], and the batch-size-1 outputs."""

    cell: Cell
    outputs: list[list[str]]
    single: list[str]


def first_difference(a: str, b: str) -> float | None:
    """Where ``b`` first differs from ``a``, as a share of ``a``'s words; None if equal."""
    x, y = a.split(), b.split()
    if x == y:
        return None
    k = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    return k / max(len(x), 1)


def run_cells(
    engine: EmulatorEngine, prompts: list[str], batch_sizes: list[int], beam: int, seed: int
) -> list[CellResult]:
    """Batch size 1, then every batch size's full rotation, for one beam width."""
    settings = DecodingSettings(beam_width=beam, max_new_tokens=64)
    single = [engine.generate([p], settings)[0].text for p in prompts]
    plan = make_plan(tuple(batch_sizes), (beam,), len(prompts), seed)
    results = []
    for b in batch_sizes:
        cell = Cell(b, beam)
        outputs = [[""] * len(prompts) for _ in range(b)]
        for batch in plan.batches(cell):
            texts = engine.generate([prompts[d] for d in batch.documents], settings)
            for pos, (doc, gen) in enumerate(zip(batch.documents, texts)):
                outputs[pos][doc] = gen.text
        results.append(CellResult(cell, outputs, single))
    return results


def cell_line(result: CellResult, refs: list[str], rate: float) -> str:
    """differ share, ROUGE-L vs references at bs1 and here, the delta, where outputs diverge."""
    single = np.mean(rouge_l(refs, result.single))
    flat = [(doc, text) for row in result.outputs for doc, text in enumerate(row)]
    here = np.mean(rouge_l([refs[d] for d, _ in flat], [t for _, t in flat]))
    where = [w for d, t in flat if (w := first_difference(result.single[d], t)) is not None]
    differ = len(where) / len(flat)
    spread = (
        f"{statistics.median(where):.2f} [{np.percentile(where, 10):.2f}, {np.percentile(where, 90):.2f}]"
        if where
        else "-"
    )
    return (
        f"{rate:5.2f} {result.cell.id:11s} {differ:7.3f} {single:9.4f} {here:9.4f} "
        f"{here - single:+8.4f}   {spread}"
    )


def position_line(result: CellResult, refs: list[str]) -> str:
    """Mean ROUGE-L against the references per position of one cell."""
    means = [np.mean(rouge_l(refs, row)) for row in result.outputs]
    return " ".join(f"p{i} {m:.4f}" for i, m in enumerate(means))


def measure(
    folder: Path, name: str, drift: Drift, fault: Fault | None, prompts: list[str], args: argparse.Namespace
) -> list[CellResult]:
    """Build one engine and run all its cells; prints how long it took."""
    start = time.perf_counter()
    engine = EmulatorEngine(build_engine(folder / name, build_limits(), fault=fault, drift=drift))
    results = [
        r for beam in args.beam_widths for r in run_cells(engine, prompts, args.batch_sizes, beam, args.seed)
    ]
    print(f"# {name}: {time.perf_counter() - start:.0f} s", flush=True)
    return results


LADDER = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)


def gap_table(folder: Path, prompts: list[str], refs: list[str]) -> list[str]:
    """Greedy at batch size 1: every step whose top two candidates are within 4 nats, binned by
    gap, and the change in ROUGE-L against the reference when the runner-up is taken there."""
    from harness.engines.emulator.engine import _Pass  # diagnostics: the engine's own pass

    engine = EmulatorEngine(build_engine(folder / "gaps", build_limits(), drift=Drift(rate=1.0)))
    settings = DecodingSettings(beam_width=1, max_new_tokens=64)
    ids = engine.tokenizer(prompts)["input_ids"]

    def decode(rows: list[int], flips: dict[int, int], margin: float) -> tuple[list[str], list[list[int]]]:
        texts: list[str] = []
        ties: list[list[int]] = []
        for i in range(0, len(rows), 8):  # batches that fit the engine's 8 x 4 KV slots
            part = {r - i: t for r, t in flips.items() if i <= r < i + 8}
            beams, found = engine._decode(
                [ids[r] for r in rows[i : i + 8]], settings, _Pass(limit=64, flips=part, margin=margin)
            )
            texts += [engine.tokenizer.decode(b[0], skip_special_tokens=True).strip() for b in beams]
            ties += found
        return texts, ties

    rows = list(range(len(prompts)))
    base, _ = decode(rows, {}, LADDER[0])
    bins: dict[tuple[int, int], float] = {}  # (prompt, step) -> the narrowest margin it is under
    for margin in reversed(LADDER):
        for r, steps in zip(rows, decode(rows, {}, margin)[1]):
            bins.update({(r, t): margin for t in steps})
    deltas: dict[float, list[float]] = {m: [] for m in LADDER}
    for (r, t), margin in sorted(bins.items()):
        forced, _ = decode([r], {0: t}, margin)
        deltas[margin].append(rouge_l([refs[r]], forced)[0] - rouge_l([refs[r]], [base[r]])[0])
    lines = ["gap under   steps   mean change vs reference   share < -0.15 (a wrong fact)"]
    for margin in LADDER:
        d = deltas[margin]
        if d:
            lines.append(
                f"{margin:9.2f} {len(d):7d} {np.mean(d):+26.4f} {np.mean([x < -0.15 for x in d]):28.3f}"
            )
    return lines


def neutrality(folder: Path, count: int, beams: list[int], seed: int) -> list[str]:
    """Rate 1 on ``count`` generated prompts in batches of two: mean change against the
    references per beam width, its standard error, and the means of blocks of 64."""
    from harness.bundled.synthetic import generate

    examples = generate(count, seed, prefix="fresh")
    prompts = [build_prompt(DEFAULT_PROMPT_TEMPLATE, e) for e in examples]  # type: ignore[arg-type]
    refs = [e.summary for e in examples]
    engine = EmulatorEngine(build_engine(folder / "neutral", build_limits(), drift=Drift(1.0, seed)))
    lines = [
        f"{count} generated prompts (seed {seed}), rate 1, batch size 2; change vs batch "
        "size 1 against the references"
    ]
    for beam in beams:
        settings = DecodingSettings(beam_width=beam, max_new_tokens=64)
        single = [engine.generate([p], settings)[0].text for p in prompts]
        paired = [g.text for i in range(0, count, 2) for g in engine.generate(prompts[i : i + 2], settings)]
        delta = np.array(rouge_l(refs, paired)) - np.array(rouge_l(refs, single))
        differ = np.mean([a != b for a, b in zip(single, paired)])
        blocks = [float(delta[i : i + 64].mean()) for i in range(0, count - 63, 64)]
        spread = f"[{min(blocks):+.4f}, {max(blocks):+.4f}]" if blocks else "-"
        lines.append(
            f"beam {beam}: {differ:.0%} differ; mean change {delta.mean():+.4f} "
            f"(standard error {delta.std(ddof=1) / np.sqrt(count):.4f}); blocks of 64 "
            f"prompts: {spread}"
        )
    return lines


def numbers(text: str, kind: Callable[[str], _N]) -> list[_N]:
    return [kind(x) for x in text.split(",")]


def reference(doc: Document) -> str:
    """A document's reference summary (every document of the bundled dataset has one)."""
    assert doc.summary is not None
    return doc.summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=lambda t: numbers(t, float), default=[0.1, 0.3, 0.6])
    parser.add_argument("--beam-widths", type=lambda t: numbers(t, int), default=[1, 2])
    parser.add_argument("--batch-sizes", type=lambda t: numbers(t, int), default=[2, 4, 8])
    parser.add_argument("--seed", type=int, default=0, help="plan seed and drift seed")
    parser.add_argument("--truncate", action="store_true")
    parser.add_argument("--gaps", action="store_true")
    parser.add_argument(
        "--neutrality",
        type=int,
        metavar="N",
        default=0,
        help="rate 1 on N generated prompts: is a flip quality-neutral?",
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    docs = load_dataset(None).documents
    prompts = [build_prompt(DEFAULT_PROMPT_TEMPLATE, d) for d in docs]
    refs = [reference(d) for d in docs]
    header = (
        " rate cell         differ  bs1 refs  here refs    delta   first difference "
        "(share of words: median [p10, p90])"
    )
    last: list[CellResult] = []
    if args.neutrality:
        with tempfile.TemporaryDirectory() as tmp:
            print("\n".join(neutrality(Path(tmp), args.neutrality, args.beam_widths, args.seed)))
        return
    if args.gaps:
        with tempfile.TemporaryDirectory() as tmp:
            print("\n".join(gap_table(Path(tmp), prompts, refs)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        runs: list[tuple[str, Drift, Fault | None, float]] = [
            (f"drift-{r}", Drift(rate=r, seed=args.seed), None, r) for r in args.rates
        ]
        if args.truncate:
            rate = args.rates[-1]
            runs.append(
                (f"truncate+drift-{rate}", Drift(rate=rate, seed=args.seed), Fault(FaultKind.TRUNCATE), rate)
            )
        print(header, flush=True)
        for name, drift, fault, rate in runs:
            results = measure(Path(tmp), name, drift, fault, prompts, args)
            print("\n".join([f"[{name}]"] + [cell_line(r, refs, rate) for r in results]), flush=True)
            last = results if fault is None else last
    widest = max(args.batch_sizes)
    for r in last:
        if r.cell.batch_size == widest:
            print(f"per position, rate {args.rates[-1]}, {r.cell.id}: {position_line(r, refs)}")


if __name__ == "__main__":
    main()
