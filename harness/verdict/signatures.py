"""Known signatures of position-dependent faults, matched against a run's failing cells.

A likely cause sends a user down one path for weeks (the incident), so a signature is named
only when the evidence fits it, and its finding says what the evidence is. Each failing cell
gets at most one finding, the first that fits, in this order:

- ``overflow``: the degraded positions are exactly those whose KV beam slots
  (``position * num_beams + beam``) lie beyond ``max_batch_size x max_beam_width`` from the
  engine's limits; without limits, only when two or more beam widths fail and one slot count
  explains every failing beam cell *and* every passing one;
- ``beam-buffer``: with the engine's limits, the degraded positions of every beam cell lie
  beyond ``max_batch_size`` beam slots alone, every cell with positions there fails, and at
  least ``FOUND_MIN`` of those positions are found (a sparse sweep can miss a few, never add
  one): a buffer sized without the beam factor (TensorRT-LLM PR #17014); greedy cells never
  overflow it (these two and their slot counting: ``harness.verdict.beam_slots``);
- ``graph-ladder``: at one beam width, two or more batch sizes that are not powers of two fail,
  each only at positions from the power of two below it, while the powers of two pass (a
  batch padded up to the next CUDA-graph size, TensorRT-LLM #17964; ``--sweep`` finds it);
- ``full-batch``: only the cells whose batch size is the engine's ``max_batch_size`` fail while
  a smaller batch of the same beam width passes, on (nearly) every prompt at their degraded
  positions (TensorRT-LLM #2072); needs the limits;
- ``padding``: the damage follows how much shorter a prompt is than the longest prompt of
  its batch, not the position (TensorRT-LLM #1881), by a Fisher test;
- ``stride``: beam search only, position 0 intact and every later position of a batch of at
  least 4 degraded, greedy fine (TensorRT-LLM PR #15125);
- ``single`` / ``partial``: one position, on (nearly) all or on a share of the prompts, the
  share estimated from the outputs that changed there (against batch size 1, net of the
  share that changes at the other positions: benign drift), not from a quality cut-off;
- ``all-positions``: every position loses quality alike (none worse than the others) while
  batch size 1 is fine: a code path used only for batch size > 1 (as TensorRT-LLM #1539);
- ``spread``: the cell's omnibus test failed with no single position significant.

A cell a sequential run stopped early holds part of its rotation, maybe too little for the
padding test to fire on a padding fault; there ``all-positions`` needs the padding ruled out:
the longest prompt of each batch, which padding leaves as it is, changed about as often as the
others. A cause that is a property of the engine, not of one cell (padding, all-positions, stride),
is named only where it is consistent: when some failing cell that could show it fits another
signature or none, it is named nowhere, and those cells are matched again without it.

Cells that fit none get no finding: the failure still stands, the harness just does not guess.
A prompt is *hit* at a position when its harm there (quality lost against batch size 1 where
the dataset has references, else agreement lost) exceeds ``HIT``; benign drift changes
outputs without costing quality, so it hits nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
from scipy import stats

from harness.model.analysis import CellAnalysis, Finding
from harness.model.cell import Cell, captured_below, is_captured
from harness.model.limits import EngineLimits
from harness.model.vocab import FindingKind, Verdict
from harness.verdict.beam_slots import beam_buffer, overflow
from harness.verdict.evidence import (
    HIT,
    WHOLE,
    CellEvidence,
    hit_share,
    hit_shares,
    longest_changed_too,
    net_share,
    seen_mean,
    share_at,
    visits,
)
from harness.verdict.messages import ranges

STRIDE_MIN_BATCH = 4  # a stride signature needs every later position of a batch this large
PADDING_MIN_PROMPTS = 3  # prompts seen both as the longest of a batch and shorter, for padding


def _graph_ladder(a: CellAnalysis, analyses: Sequence[CellAnalysis]) -> Finding | None:
    """Padded batch sizes fail at their padded-in positions; the powers of two pass."""
    same = [b for b in analyses if b.cell.beam_width == a.cell.beam_width]
    failing = [b for b in same if b.verdict == Verdict.FAIL]
    if len(failing) < 2 or a not in failing:
        return None
    for b in failing:
        size = b.cell.batch_size
        low = captured_below(size)
        if is_captured(size) or not b.degraded_positions or min(b.degraded_positions) < low:
            return None
    powers = [b.cell.batch_size for b in same if is_captured(b.cell.batch_size)]
    if any(b.verdict != Verdict.PASS for b in same if is_captured(b.cell.batch_size)):
        return None
    sizes = sorted(b.cell.batch_size for b in failing)
    if not any(p > sizes[0] for p in powers):
        return None  # no captured size above a failing one passes: a plain threshold
    return Finding(
        FindingKind.GRAPH_LADDER,
        f"batch sizes {ranges(sizes)} fail, each at positions from the power of two "
        f"below it, and the powers of two {', '.join(map(str, sorted(powers)))} pass: "
        "matches a CUDA-graph batch-size ladder (a batch padded up to the next "
        "captured size; as TensorRT-LLM #17964); to confirm, run with CUDA graphs "
        "off or capture every batch size",
        evidence=f"beam width {a.cell.beam_width}: failing sizes are not powers of "
        "two, degraded positions start at the power of two below each",
    )


def _full_batch(
    e: CellEvidence, analyses: Sequence[CellAnalysis], limits: EngineLimits | None
) -> Finding | None:
    """Only the full batch fails, and every prompt at its degraded positions: damage on a share
    of them only (a slot that corrupts some requests) is not a full-batch path, even where the
    largest batch is the only one with that position."""
    a = e.analysis
    full = limits.max_batch_size if limits is not None else None
    if full is None or a.cell.batch_size != full:
        return None
    if any(share_at(e, p) < WHOLE for p in a.degraded_positions):
        return None
    smaller = [b for b in analyses if b.cell.beam_width == a.cell.beam_width and 1 < b.cell.batch_size < full]
    if not smaller or any(b.verdict != Verdict.PASS for b in smaller):
        return None
    if any(b.verdict != Verdict.PASS and b.cell.batch_size != full for b in analyses):
        return None
    sizes = ", ".join(str(b.cell.batch_size) for b in smaller)
    return Finding(
        FindingKind.FULL_BATCH,
        f"only when the batch is full (batch size {full} = the engine's "
        f"max_batch_size): position {ranges(a.degraded_positions)} "
        f"degraded, batch sizes {sizes} are fine; suspect a fault on "
        "the full-batch path (as TensorRT-LLM #2072)",
        evidence=f"only cells at max_batch_size {full} fail; batch sizes {sizes} pass",
    )


def _padding(e: CellEvidence) -> Finding | None:
    """The longest prompt of each batch needs no padding: a padding fault spares it. Over all
    visits (a Fisher test), and within the prompts that were the longest of some batches and
    shorter in others, where the same prompt must be hit far more often as a shorter one: a
    prompt's own difficulty (long documents lose less when every output is cut) is not
    padding, and without such prompts (the sparse rotation) no padding is named."""
    if e.shorter is None:
        return None
    by_prompt = visits(e, e.shorter)
    pairs = [pair for v in by_prompt for pair in v]
    harm, short = [d for d, _ in pairs], [s for _, s in pairs]
    longest, shorter = hit_shares(pairs)
    if len(longest) < 5 or not shorter:
        return None
    longest_hit, shorter_hit = sum(longest) / len(longest), sum(shorter) / len(shorter)
    table = np.array(
        [[sum(longest), len(longest) - sum(longest)], [sum(shorter), len(shorter) - sum(shorter)]]
    )
    _, p = stats.fisher_exact(table, alternative="less")
    if not (p < 1e-3 and shorter_hit >= 2 * longest_hit + 0.2):
        return None
    both = [v for v in by_prompt if any(s == 0 for _, s in v) and any(s > 0 for _, s in v)]
    own_longest, own_shorter = hit_shares([pair for v in both for pair in v])
    if len(both) < PADDING_MIN_PROMPTS or not (
        sum(own_shorter) / len(own_shorter) >= sum(own_longest) / len(own_longest) + 0.3
    ):
        return None
    rho, _ = stats.spearmanr(short, harm)
    return Finding(
        FindingKind.PADDING,
        "damage follows prompt length rather than position: prompts "
        f"shorter than the longest in their batch lose quality in "
        f"{shorter_hit:.0%} of cases, the longest prompt of a batch in "
        f"{longest_hit:.0%} (Spearman rho {rho:.2f} between harm and "
        "missing length); suspect padding (padding on the wrong side or "
        "not masked, as TensorRT-LLM #1881)",
        evidence=f"Fisher exact test, longest vs shorter prompts hit: p {p:.1g}; the "
        f"{len(both)} prompts that were the longest of some batches and "
        f"shorter in others are hit in {sum(own_shorter)} of "
        f"{len(own_shorter)} visits as a shorter prompt, {sum(own_longest)} "
        f"of {len(own_longest)} as the longest",
    )


def _stride(e: CellEvidence, analyses: Sequence[CellAnalysis]) -> Finding | None:
    a = e.analysis
    later = set(range(1, a.cell.batch_size))
    if a.cell.beam_width == 1 or a.cell.batch_size < STRIDE_MIN_BATCH or set(a.degraded_positions) != later:
        return None
    greedy = [b for b in analyses if b.cell.beam_width == 1 and b.cell.batch_size == a.cell.batch_size]
    if any(b.verdict != Verdict.PASS for b in greedy):
        return None
    if hit_share(e.harm[0]) > 0.02:
        return None
    means = [seen_mean(row) for row in e.harm]
    return Finding(
        FindingKind.STRIDE,
        f"beam search only: position 0 intact, positions "
        f"{ranges(a.degraded_positions)} degraded (mean harm by position "
        f"{', '.join(f'{m:.2f}' for m in means)}): suspect a stride or offset "
        "error once requests in the batch finish unevenly (as TensorRT-LLM "
        "PR #15125)" + ("" if greedy else "; run --beam-widths 1 too to confirm greedy is fine"),
        evidence=f"every position but 0 of a batch of {a.cell.batch_size} degraded at "
        f"beam width {a.cell.beam_width}, position 0 untouched" + (", greedy passes" if greedy else ""),
    )


def _singleshare_at(e: CellEvidence, p: int) -> tuple[float, str] | None:
    """The share of prompts a fault at position ``p`` alone hits, and what it rests on; None
    when the damage is not singled out at ``p``. From the outputs that changed there, net of
    the share that changes at the other positions (benign drift changes outputs at every
    position alike); without that record, from the prompts whose harm exceeds ``HIT``."""
    if e.changed:
        harm = [seen_mean(row) for row in e.harm]
        if harm[p] <= 0 or max((h for q, h in enumerate(harm) if q != p), default=0.0) > harm[p] / 2:
            return None  # the quality lost is not singled out at p
        here = seen_mean(e.changed[p])
        elsewhere = [seen_mean(row) for q, row in enumerate(e.changed) if q != p]
        background = float(np.median(elsewhere)) if elsewhere else 0.0
        share = net_share(here, background)
        if share == 0 or (elsewhere and net_share(max(elsewhere), background) > share / 2):
            return None
        return share, (
            f"{here:.0%} of outputs at position {p} differ from batch size 1, "
            f"{background:.0%} at the other positions (median)"
        )
    hit = hit_share(e.harm[p])
    others = [hit_share(row) for q, row in enumerate(e.harm) if q != p]
    if hit == 0 or (others and max(others) > hit / 2):
        return None
    return hit, (
        f"{hit:.0%} of prompts at position {p} lose more than {HIT} ROUGE-L, at most "
        f"{max(others, default=0.0):.0%} at any other"
    )


def _single(e: CellEvidence) -> Finding | None:
    a = e.analysis
    if len(a.degraded_positions) != 1:
        return None
    p = a.degraded_positions[0]
    found = _singleshare_at(e, p)
    if found is None:
        return None
    share, evidence = found
    if share >= WHOLE:
        return Finding(
            FindingKind.SINGLE,
            f"only position {p} degraded, on {share:.0%} of prompts: a fault tied to that batch slot",
            evidence=evidence,
        )
    return Finding(
        FindingKind.PARTIAL,
        f"only position {p} degraded, on about {share:.0%} of prompts (the "
        "others match batch size 1): a slot-specific fault that hits some "
        "requests only",
        evidence=evidence,
    )


def _all_positions(e: CellEvidence) -> Finding | None:
    a = e.analysis
    if len(a.degraded_positions) != a.cell.batch_size:
        return None
    if any(s.position_test is not None and s.position_test.flagged for s in a.positions):
        return None  # some positions are worse than others: not a uniform batch > 1 path
    quality = [s.quality for s in a.positions if s.quality is not None]
    if not quality or a.quality_bs1 is None:
        return None
    return Finding(
        FindingKind.ALL_POSITIONS,
        f"every position loses quality alike (against the references "
        f"{min(quality):.2f}–{max(quality):.2f} vs {a.quality_bs1:.2f} "
        "at batch size 1; no position worse than the others): suspect "
        "a code path used only for batch size > 1 (as TensorRT-LLM "
        "#1539)",
        evidence="quality drop at every position, none position-dependent",
    )


def _candidates(
    e: CellEvidence,
    analyses: Sequence[CellAnalysis],
    failing: Sequence[CellAnalysis],
    limits: EngineLimits | None,
) -> Iterator[Finding | None]:
    """Each signature's finding for one failing cell, in order, computed as asked for."""
    a = e.analysis
    yield overflow(a, analyses, failing, limits)
    yield beam_buffer(a, analyses, limits)
    yield _graph_ladder(a, analyses)
    yield _full_batch(e, analyses, limits)
    yield _padding(e)
    yield _stride(e, analyses)
    yield _single(e)
    # a part of a rotation may be too little for the padding test to fire on a padding fault:
    # there, damage at every position is named uniform only where the longest prompts changed too
    yield None if e.partial and not longest_changed_too(e) else _all_positions(e)


# causes that belong to the engine, not to one cell, and the failing cells that could show them
ENGINE_WIDE: dict[FindingKind, Callable[[CellAnalysis], bool]] = {
    FindingKind.PADDING: lambda a: a.cell.batch_size > 1,
    FindingKind.ALL_POSITIONS: lambda a: a.cell.batch_size > 1,
    FindingKind.STRIDE: lambda a: a.cell.beam_width > 1 and a.cell.batch_size >= STRIDE_MIN_BATCH,
}


def match(evidence: Sequence[CellEvidence], limits: EngineLimits | None) -> dict[Cell, Finding]:
    """The finding for every failing cell that fits a known signature, engine-wide causes only
    where every failing cell that could show them does."""
    banned: set[FindingKind] = set()
    while True:
        out = _match(evidence, limits, banned)
        failing = [
            e.analysis
            for e in evidence
            if e.analysis.verdict == Verdict.FAIL and e.analysis.degraded_positions
        ]
        named = {kind: sum(f.kind == kind for f in out.values()) for kind in ENGINE_WIDE}
        inconsistent = [
            kind
            for kind, could in ENGINE_WIDE.items()
            if named[kind]
            and any(could(a) and (a.cell not in out or out[a.cell].kind != kind) for a in failing)
        ]
        if not inconsistent:
            return out
        # the least supported first: the cells it leaves may then fit the other consistently
        banned.add(min(inconsistent, key=lambda kind: named[kind]))


def _match(
    evidence: Sequence[CellEvidence], limits: EngineLimits | None, banned: set[FindingKind]
) -> dict[Cell, Finding]:
    analyses = [e.analysis for e in evidence]
    failing = [a for a in analyses if a.verdict == Verdict.FAIL and a.degraded_positions]
    out: dict[Cell, Finding] = {}
    for e in evidence:
        a = e.analysis
        if a.verdict != Verdict.FAIL:
            continue
        if not a.degraded_positions:
            if a.spread and a.omnibus is not None:
                out[a.cell] = Finding(
                    FindingKind.SPREAD,
                    f"no single position is significant but the cell's "
                    f"mean quality drop over positions is "
                    f"{a.omnibus.drop:.3f}: damage spread thinly over "
                    "many positions",
                    evidence="the cell's omnibus test",
                )
            continue
        found = next(
            (f for f in _candidates(e, analyses, failing, limits) if f is not None and f.kind not in banned),
            None,
        )
        if found is not None:
            out[a.cell] = found
    return out
