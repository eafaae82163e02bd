"""The beam-slot signatures, ``overflow`` and ``beam-buffer``, and the slot counting they share.

A beam cell's position p holds the KV beam slots ``p * beam_width + beam``; both signatures
fit only where the degraded positions are those whose slots lie beyond one count: the
engine's ``max_batch_size x max_beam_width`` (or, without limits, the one count that explains
every beam cell) for ``overflow``, ``max_batch_size`` alone for ``beam-buffer``.
``harness.verdict.signatures`` says when each is named and tries them first.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.model.analysis import CellAnalysis, Finding
from harness.model.limits import EngineLimits, overflow_positions
from harness.model.vocab import FindingKind

FOUND_MIN = 0.75  # share of a threshold's damaged positions a run must find to name it


def _beyond(slots: int, analyses: Sequence[CellAnalysis]) -> tuple[int, int] | None:
    """How well ``slots`` beam slots explain the beam cells: (positions found, positions
    beyond), or None where it cannot: a beam cell degrades a position that lies within the
    slots, or has positions beyond them and degrades none of them (or none beyond and some
    degraded), or no beam cell has positions beyond. A sparse sweep of a large batch has a
    few prompts per position, so a damaged one can fall short of significance: found can be
    below beyond, never a position extra."""
    beyond = found = 0
    for a in analyses:
        if a.cell.beam_width == 1:
            continue
        expected = set(overflow_positions(a.cell.batch_size, a.cell.beam_width, slots))
        degraded = set(a.degraded_positions)
        if not degraded <= expected or bool(expected) != bool(degraded):
            return None
        beyond, found = beyond + len(expected), found + len(degraded)
    return (found, beyond) if beyond else None


def _explains(slots: int, analyses: Sequence[CellAnalysis]) -> bool:
    """Every beam cell's degraded positions are exactly its overflow positions under ``slots``."""
    counts = _beyond(slots, analyses)
    return counts is not None and counts[0] == counts[1]


def _inferred_slots(analyses: Sequence[CellAnalysis], failing: Sequence[CellAnalysis]) -> int | None:
    """Without the engine's limits: a slot count that explains every beam cell, failing or
    passing, when at least two beam widths fail and every failing cell is a beam cell."""
    if any(a.cell.beam_width == 1 or not a.degraded_positions for a in failing):
        return None
    if len({a.cell.beam_width for a in failing}) < 2:
        return None
    top = max(a.cell.batch_size * a.cell.beam_width for a in failing)
    fits = [s for s in range(1, top) if _explains(s, analyses)]
    return fits[0] if fits else None  # the smallest count that explains them all


def overflow(
    a: CellAnalysis,
    analyses: Sequence[CellAnalysis],
    failing: Sequence[CellAnalysis],
    limits: EngineLimits | None,
) -> Finding | None:
    """Beam cell ``a`` degrades exactly the positions whose slots lie beyond the engine's beam
    slots (or beyond the one slot count that explains every beam cell, without limits)."""
    if a.cell.beam_width == 1:
        return None
    known = limits if limits is not None and limits.beam_slots is not None else None
    slots = known.beam_slots if known is not None else _inferred_slots(analyses, failing)
    if slots is None:
        return None
    expected = overflow_positions(a.cell.batch_size, a.cell.beam_width, slots)
    if not expected or set(expected) != set(a.degraded_positions):
        return None
    beams = sorted({f.cell.beam_width for f in failing if f.cell.beam_width > 1}, reverse=True)
    firsts = []
    for w in beams:
        starts = [
            min(f.degraded_positions) for f in failing if f.cell.beam_width == w and f.degraded_positions
        ]
        if starts:
            firsts.append(f"positions >= {min(starts)} degraded at beam width {w}")
    source = (
        f"max_batch_size {known.max_batch_size} x max_beam_width {known.max_beam_width} = {slots} slots"
        if known is not None
        else f"{slots} beam slots (inferred: the engine's limits are unknown, and one slot "
        f"count explains the degraded positions at beam widths "
        f"{', '.join(map(str, sorted(beams)))})"
    )
    fix = ""
    if known is not None and known.max_beam_width is not None and known.max_batch_size is not None:
        flags = []
        widest = max(f.cell.beam_width for f in failing)
        biggest = max(f.cell.batch_size for f in failing)
        if widest > known.max_beam_width:
            flags.append(f"--max_beam_width {widest}")
        if biggest > known.max_batch_size:
            flags.append(f"--max_batch_size {biggest}")
        fix = "; rebuild with " + (" ".join(flags) if flags else "larger limits")
    return Finding(
        FindingKind.OVERFLOW,
        f"{' and '.join(firsts)}: matches KV beam-slot overflow for {source}{fix}",
        evidence="degraded positions = those whose beam slots "
        f"(position x beam width + beam) lie beyond {slots}",
    )


def beam_buffer(
    a: CellAnalysis, analyses: Sequence[CellAnalysis], limits: EngineLimits | None
) -> Finding | None:
    """Beam slots counted against max_batch_size alone (the beam factor left out)."""
    if a.cell.beam_width == 1 or limits is None or limits.max_batch_size is None:
        return None
    slots = limits.max_batch_size
    counts = _beyond(slots, analyses)
    if slots == limits.beam_slots or counts is None or not a.degraded_positions:
        return None
    found, total = counts
    if found < FOUND_MIN * total:
        return None
    expected = overflow_positions(a.cell.batch_size, a.cell.beam_width, slots)
    w = a.cell.beam_width
    return Finding(
        FindingKind.BEAM_BUFFER,
        f"positions >= {min(expected)} degraded at beam width {w}: their beam slots "
        f"(position x {w} + beam) lie beyond {slots}, the engine's max_batch_size, "
        f"though it was built for {limits.beam_slots} (max_beam_width "
        f"{limits.max_beam_width}): suspect a buffer sized without the beam factor "
        "(as TensorRT-LLM PR #17014)",
        evidence=f"every beam cell's degraded positions lie beyond {slots} beam slots, "
        f"and every cell with positions there fails ({found} of their {total} "
        "positions degraded)",
    )
