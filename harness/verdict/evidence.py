"""What the signatures read of a cell besides its analysis: per prompt and position, the harm
against batch size 1, the tokens a prompt was short of its batch's longest, and whether its
output changed; and the shares of prompts damage reached, read from them (the sequential
design reads the same shares to know what a clean look could have missed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.model.analysis import CellAnalysis

HIT = 0.2  # a prompt is hit at a position when its harm there exceeds this
WHOLE = 0.9  # damage on at least this share of a position's prompts is on (nearly) all of them


Shortfall = tuple[tuple[int, ...], ...]  # [position][document]: tokens short of the batch's longest prompt


@dataclass(frozen=True)
class CellEvidence:
    """One analysed cell plus the per-prompt numbers the signatures need."""

    analysis: CellAnalysis
    harm: tuple[tuple[float, ...], ...]  # [position][document]: quality (else agreement) lost
    # against batch size 1 (NaN where the document never sat at that position, sparse)
    shorter: Shortfall | None = None  # [position][document]: tokens short of
    # the longest prompt of the batch it sat in
    changed: tuple[tuple[float, ...], ...] = ()  # [position][document]: 1.0 where the output is
    # not batch size 1's (NaN: not there); empty when unknown
    # part of the cell's rotation only (a sequential run stopped it once its answer was known):
    # maybe too little for the padding test, so damage at every position is named uniform only
    # where the longest prompts' outputs changed too (``longest_changed_too``)
    partial: bool = False


def seen_in(row: Sequence[float]) -> list[float]:
    """Harm of the prompts that sat at this position (NaN: not there, --rotation sparse)."""
    return [d for d in row if not math.isnan(d)]


def seen_mean(row: Sequence[float]) -> float:
    """The mean over the prompts that sat at this position (0 for none)."""
    seen = seen_in(row)
    return math.fsum(seen) / len(seen) if seen else 0.0


def hit_share(row: Sequence[float]) -> float:
    seen = seen_in(row)
    return sum(d > HIT for d in seen) / max(1, len(seen))


def hit_shares(pairs: Sequence[tuple[float, int]]) -> tuple[list[bool], list[bool]]:
    """Hits of the visits as the longest prompt of a batch, and as a shorter one."""
    return ([d > HIT for d, s in pairs if s == 0], [d > HIT for d, s in pairs if s > 0])


def net_share(share: float, background: float) -> float:
    """The share of prompts a fault changed, net of those benign drift changes anyway."""
    return max(0.0, min(1.0, (share - background) / (1.0 - background))) if background < 1 else 0.0


def share_at(e: CellEvidence, p: int) -> float:
    """The share of prompts the damage reaches at position ``p``: its outputs that changed, net
    of the share that changes at the positions not degraded (benign drift); without that
    record, the prompts whose harm exceeds ``HIT``."""
    if not e.changed:
        return hit_share(e.harm[p])
    rest = [seen_mean(row) for q, row in enumerate(e.changed) if q not in e.analysis.degraded_positions]
    return net_share(seen_mean(e.changed[p]), float(np.median(rest)) if rest else 0.0)


def visits(e: CellEvidence, shorter: Shortfall) -> list[list[tuple[float, int]]]:
    """Per prompt, its visits: (harm, tokens short of its batch's longest prompt) at each
    position it sat at."""
    return [
        [(drow[i], srow[i]) for drow, srow in zip(e.harm, shorter) if not math.isnan(drow[i])]
        for i in range(len(e.harm[0]) if e.harm else 0)
    ]


def longest_changed_too(e: CellEvidence) -> bool:
    """Whether the outputs of the longest prompt of each batch, the one padding leaves as it
    is, changed about as often as the shorter prompts' (at least 0.8 of their share and half of
    the visits), over at least 5 visits as the longest; False where the cell lacks the lengths
    or the changed-output record."""
    if e.shorter is None or not e.changed:
        return False
    seats = [
        (c, s) for crow, srow in zip(e.changed, e.shorter) for c, s in zip(crow, srow) if not math.isnan(c)
    ]
    longest = [c for c, s in seats if s == 0]
    shorter = [c for c, s in seats if s > 0]
    if len(longest) < 5 or not shorter:
        return False
    share = sum(longest) / len(longest)
    return share >= 0.5 and share >= 0.8 * sum(shorter) / len(shorter)
