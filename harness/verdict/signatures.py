"""Known signatures of position-dependent faults, matched against a run's flagged cells.

Each failing cell gets at most one finding, the first signature that fits, in this order:

- ``overflow``: the degraded positions are exactly those whose KV beam slots
  (``position * num_beams + beam``) lie beyond ``max_batch_size x max_beam_width``, from the
  engine's limits or, without them, for one slot count that explains every failing cell;
- ``full-batch``: only cells whose batch size is the engine's ``max_batch_size`` fail while a
  smaller batch of the same beam width passes (TensorRT-LLM #2072);
- ``padding``: the damage follows how much shorter a prompt is than the longest prompt of
  its batch, not the position (TensorRT-LLM #1881);
- ``stride``: beam search only, position 0 untouched, later positions degraded, greedy fine
  (TensorRT-LLM PR #15125);
- ``partial``: one position, on a share of the prompts only;
- ``all-positions``: every position of the cell, batch size 1 fine (a batch > 1 code path,
  e.g. TensorRT-LLM #1539);
- ``spread``: the cell's omnibus test failed with no single position significant.

Cells that fit none get no finding: the failure still stands, the harness just does not
guess.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

from harness.limits.engine_config import EngineLimits, overflow_positions
from harness.plan import Cell, Plan
from harness.results import CellAnalysis, Finding, Verdict
from harness.verdict.statistics import ranges

HIT = 0.1  # a prompt counts as hit at a position when its ROUGE-L drops by more than this


@dataclass(frozen=True)
class CellEvidence:
    """One analysed cell plus the per-prompt numbers the signatures need."""

    analysis: CellAnalysis
    drops: tuple[tuple[float, ...], ...]  # [position][document]: batch-size-1 level - score
    # (NaN where the document never sat at that position, --rotation sparse)
    shorter: tuple[tuple[int, ...], ...] | None = None  # [position][document]: tokens short of
    # the longest prompt of the batch it sat in


def _seen(row: Sequence[float]) -> list[float]:
    """Drops of the prompts that sat at this position (NaN: not there, --rotation sparse)."""
    return [d for d in row if not math.isnan(d)]


def shortfall(plan: Plan, cell: Cell, lengths: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """For every position and document: how many tokens shorter the prompt was than the
    longest prompt of its batch (the padding it needed)."""
    n = len(plan.order)
    out = [[0] * n for _ in range(cell.batch_size)]
    for batch in plan.batches(cell):
        longest = max(lengths[d] for d in batch.documents)
        for position, doc in enumerate(batch.documents):
            out[position][doc] = longest - lengths[doc]
    return tuple(tuple(row) for row in out)


def _inferred_slots(failing: Sequence[CellAnalysis]) -> int | None:
    """A slot count S whose overflow positions are the degraded ones in every failing beam cell."""
    beam = [a for a in failing if a.cell.beam_width > 1 and a.degraded_positions]
    if not beam or len(beam) != len(failing):
        return None
    for slots in range(1, max(a.cell.batch_size * a.cell.beam_width for a in beam)):
        if all(a.degraded_positions == overflow_positions(a.cell.batch_size, a.cell.beam_width, slots)
               for a in beam):
            return slots
    return None


def _overflow(a: CellAnalysis, failing: Sequence[CellAnalysis], limits: EngineLimits | None
              ) -> Finding | None:
    known = limits is not None and limits.beam_slots is not None
    slots = limits.beam_slots if known else _inferred_slots(failing)  # type: ignore[union-attr]
    if slots is None or a.cell.beam_width == 1:
        return None
    expected = overflow_positions(a.cell.batch_size, a.cell.beam_width, slots)
    if not expected or set(expected) != set(a.degraded_positions):
        return None
    beams = sorted({f.cell.beam_width for f in failing if f.cell.beam_width > 1}, reverse=True)
    firsts = []
    for w in beams:
        starts = [min(f.degraded_positions) for f in failing
                  if f.cell.beam_width == w and f.degraded_positions]
        if starts:
            firsts.append(f"positions >= {min(starts)} degraded at beam width {w}")
    source = (f"max_batch_size {limits.max_batch_size} x max_beam_width "  # type: ignore[union-attr]
              f"{limits.max_beam_width} = {slots} slots" if known
              else f"{slots} beam slots (inferred from the pattern; the engine's limits are unknown)")
    fix = ""
    if known:
        flags = []
        widest = max(f.cell.beam_width for f in failing)
        biggest = max(f.cell.batch_size for f in failing)
        if widest > limits.max_beam_width:  # type: ignore[operator, union-attr]
            flags.append(f"--max_beam_width {widest}")
        if biggest > limits.max_batch_size:  # type: ignore[operator, union-attr]
            flags.append(f"--max_batch_size {biggest}")
        fix = "; rebuild with " + (" ".join(flags) if flags else "larger limits")
    return Finding("overflow", f"{' and '.join(firsts)}: matches KV beam-slot overflow for {source}"
                               f"{fix}")


def _full_batch(a: CellAnalysis, analyses: Sequence[CellAnalysis], limits: EngineLimits | None
                ) -> Finding | None:
    full = limits.max_batch_size if limits is not None else None
    if full is None or a.cell.batch_size != full:
        return None
    smaller = [b for b in analyses if b.cell.beam_width == a.cell.beam_width
               and 1 < b.cell.batch_size < full]
    if not smaller or any(b.verdict != Verdict.PASS for b in smaller):
        return None
    if any(b.verdict != Verdict.PASS and b.cell.batch_size != full for b in analyses):
        return None
    sizes = ", ".join(str(b.cell.batch_size) for b in smaller)
    return Finding("full-batch", f"only when the batch is full (batch size {full} = the engine's "
                                 f"max_batch_size): position {ranges(a.degraded_positions)} "
                                 f"degraded, batch sizes {sizes} are fine; suspect a fault on "
                                 "the full-batch path (as TensorRT-LLM #2072)")


def _padding(e: CellEvidence) -> Finding | None:
    """The longest prompt of each batch needs no padding: a padding fault spares it."""
    if e.shorter is None:
        return None
    pairs = [(d, s) for drow, srow in zip(e.drops, e.shorter) for d, s in zip(drow, srow)
             if not math.isnan(d)]
    drops, short = [d for d, _ in pairs], [s for _, s in pairs]
    longest = [d > HIT for d, s in zip(drops, short) if s == 0]
    shorter = [d > HIT for d, s in zip(drops, short) if s > 0]
    if len(longest) < 5 or not shorter:
        return None
    longest_hit, shorter_hit = sum(longest) / len(longest), sum(shorter) / len(shorter)
    _, p = stats.fisher_exact([[sum(longest), len(longest) - sum(longest)],
                               [sum(shorter), len(shorter) - sum(shorter)]], alternative="less")
    if not (p < 1e-3 and shorter_hit >= 2 * longest_hit + 0.2):
        return None
    rho, _ = stats.spearmanr(short, drops)
    return Finding("padding", "damage follows prompt length rather than position: prompts "
                              f"shorter than the longest in their batch lose quality in "
                              f"{shorter_hit:.0%} of cases, the longest prompt of a batch in "
                              f"{longest_hit:.0%} (Spearman rho {rho:.2f} between drop and "
                              "missing length); suspect padding (padding on the wrong side or "
                              "not masked, as TensorRT-LLM #1881)")


def _stride(e: CellEvidence, analyses: Sequence[CellAnalysis]) -> Finding | None:
    a = e.analysis
    if a.cell.beam_width == 1 or 0 in a.degraded_positions or len(a.degraded_positions) < 2:
        return None
    greedy = [b for b in analyses if b.cell.beam_width == 1 and b.cell.batch_size == a.cell.batch_size]
    if any(b.verdict != Verdict.PASS for b in greedy):
        return None
    first = _seen(e.drops[0])
    if sum(d > HIT for d in first) > 0.02 * len(first):
        return None
    means = [math.fsum(_seen(row)) / max(1, len(_seen(row))) for row in e.drops]
    return Finding("stride", f"beam search only: position 0 intact, positions "
                             f"{ranges(a.degraded_positions)} degraded (mean drop by position "
                             f"{', '.join(f'{m:.2f}' for m in means)}): suspect a stride or offset "
                             "error once requests in the batch finish unevenly (as TensorRT-LLM "
                             "PR #15125)"
                             + ("" if greedy else "; run --beam-widths 1 too to confirm greedy "
                                                  "is fine"))


def _single(e: CellEvidence) -> Finding | None:
    a = e.analysis
    if len(a.degraded_positions) != 1:
        return None
    p = a.degraded_positions[0]
    seen = _seen(e.drops[p])
    share = sum(d > HIT for d in seen) / max(1, len(seen))
    if share == 0:  # small drops spread over many prompts: no slot-shaped signature
        return None
    if share >= 0.9:
        return Finding("single", f"only position {p} degraded, on {share:.0%} of prompts: a "
                                 "fault tied to that batch slot")
    return Finding("partial", f"only position {p} degraded, on {share:.0%} of prompts (the others "
                              "match batch size 1): a slot-specific fault that hits some "
                              "requests only")


def match(evidence: Sequence[CellEvidence], limits: EngineLimits | None) -> dict[Cell, Finding]:
    """The finding for every failing cell that fits a known signature."""
    analyses = [e.analysis for e in evidence]
    failing = [a for a in analyses if a.verdict == Verdict.FAIL]
    out: dict[Cell, Finding] = {}
    for e in evidence:
        a = e.analysis
        if a.verdict != Verdict.FAIL:
            continue
        if not a.degraded_positions:
            out[a.cell] = Finding("spread", f"no single position is significant but the cell's "
                                            f"mean drop over positions is {a.cell_drop:.3f}: damage "
                                            "spread thinly over many positions")
            continue
        found = (_overflow(a, failing, limits) or _full_batch(a, analyses, limits)
                 or _padding(e) or _stride(e, analyses) or _single(e))
        if found is None and len(a.degraded_positions) == a.cell.batch_size:
            found = Finding("all-positions", "every position degraded while batch size 1 is "
                                             "fine: suspect a code path used only for batch size "
                                             "> 1 (as TensorRT-LLM #1539)")
        if found is not None:
            out[a.cell] = found
    return out
