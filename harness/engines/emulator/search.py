"""The emulator's decoding search: beam search with early stopping, and the near-ties that
benign drift takes the runner-up of (``drift.py``).

``Beams`` holds a batch's W running beams and finished hypotheses per entry and keeps the W
best candidates per step; ``greedy_ties`` does the same bookkeeping for greedy decoding. Both
record each near-tie on the line of the output it lies on, so that drift flips only where the
batch-size-1 output had a near-tie, and never to the end token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from harness.engines.emulator.drift import near_tie


def greedy_ties(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    step: int,
    done: list[bool],
    pending: dict[int, int],
    ties: list[list[int]],
    eos: int,
    margin: float,
) -> None:
    """Record each running row's near-tie at this step; a row due to flip takes the runner-up
    (``tokens`` is changed in place)."""
    top_v, top_i = logits.topk(2, dim=-1)
    for r, ((best, second), pair) in enumerate(zip(top_v.tolist(), top_i.tolist())):
        if done[r] or not near_tie(best, second, (pair[0], pair[1]), eos, margin):
            continue
        ties[r].append(step)
        if r in pending and step >= pending[r]:
            tokens[r] = pair[1]
            del pending[r]


class Beams:
    """Beam-search state of a batch: W running beams and the finished hypotheses per entry."""

    def __init__(self, entries: int, width: int, eos: int, length_penalty: float) -> None:
        self.entries, self.width, self.eos, self.length_penalty = entries, width, eos, length_penalty
        self.scores = torch.full((entries, width), float("-inf"), dtype=torch.float64)
        self.scores[:, 0] = 0.0  # all beams start equal: expand from beam 0 only
        self.history: list[list[int]] = [[] for _ in range(entries * width)]
        self.finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(entries)]
        self.done = [False] * entries

    def norm(self, score: float, length: int) -> float:
        return score / float(max(length, 1) ** self.length_penalty)

    def step(
        self,
        step: int,
        top_scores: list[list[float]],
        top_idx: list[list[int]],
        vocab: int,
        margin: float | None,
        pending: dict[int, int],
        ties: list[list[tuple[int, tuple[int, ...]]]],
        unflipped: Mapping[int, tuple[int, ...]],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep the W best non-final candidates per entry; returns (source row, token) per row."""
        width = self.width
        source = torch.arange(self.entries * width)
        tokens = torch.full((self.entries * width,), self.eos, dtype=torch.long)
        new_scores = torch.full((self.entries, width), float("-inf"), dtype=torch.float64)
        new_history: list[list[int]] = [[] for _ in range(self.entries * width)]
        for s in range(self.entries):
            if self.done[s]:
                continue
            idx = top_idx[s]
            if margin is not None:
                idx = self._tie(s, step, top_scores[s], idx, vocab, margin, pending, ties, unflipped.get(s))
            slot = 0
            for rank, (sc, ix) in enumerate(zip(top_scores[s], idx)):
                parent, token = divmod(ix, vocab)
                row = s * width + parent
                if token == self.eos:
                    if rank < width:
                        self.finished[s].append((self.norm(sc, step + 1), self.history[row]))
                    continue
                dst = s * width + slot
                source[dst], tokens[dst] = row, token
                new_scores[s, slot] = sc
                new_history[dst] = self.history[row] + [token]
                slot += 1
                if slot == width:
                    break
            if len(self.finished[s]) >= width:
                self.done[s] = True
        self.scores, self.history = new_scores, new_history
        return source, tokens

    def _tie(
        self,
        s: int,
        step: int,
        scores: list[float],
        idx: list[int],
        vocab: int,
        margin: float,
        pending: dict[int, int],
        ties: list[list[tuple[int, tuple[int, ...]]]],
        output: tuple[int, ...] | None,
    ) -> list[int]:
        """A near-tie between the best candidate and its runner-up from the same beam (same
        prefix, another token) is recorded with the best candidate's line; an entry due to
        flip swaps their scores, at every such near-tie while its leading line is still its
        batch-size-1 ``output`` (a swap the old line wins back is not a flip yet)."""
        parent, token = divmod(idx[0], vocab)
        for j in range(1, len(idx)):
            other_parent, other = divmod(idx[j], vocab)
            if other_parent == parent:
                break
        else:
            return idx
        if not near_tie(scores[0], scores[j], (token, other), self.eos, margin):
            return idx
        line = (*self.history[s * self.width + parent], token)
        ties[s].append((step, line))
        if s not in pending or step < pending[s]:
            return idx
        if output is not None and output[: len(line)] != line:
            del pending[s]  # the leading line has left the batch-size-1 output: flipped
            return idx
        swapped = list(idx)
        swapped[0], swapped[j] = idx[j], idx[0]
        return swapped

    def results(
        self, unflipped: Mapping[int, tuple[int, ...]] | None = None, margin: float | None = None
    ) -> list[list[list[int]]]:
        """Each entry's W best hypotheses (length-normalized score), best first; an entry in
        ``unflipped`` still ending on that output takes its runner-up if the two are near-tied."""
        results = []
        for s in range(self.entries):
            hyps = list(self.finished[s])
            if not self.done[s]:
                for b in range(self.width):
                    sc = float(self.scores[s, b])
                    row = self.history[s * self.width + b]
                    if not math.isinf(sc):
                        hyps.append((self.norm(sc, len(row)), row))
            hyps.sort(key=lambda h: -h[0])  # stable: ties keep discovery order
            if (
                margin is not None
                and unflipped
                and s in unflipped
                and len(hyps) > 1
                and tuple(hyps[0][1]) == unflipped[s]
                and self._final_tie(hyps[0], hyps[1], margin)
            ):
                hyps[0], hyps[1] = hyps[1], hyps[0]
            results.append([h[1] for h in hyps[: self.width]] or [[]])
        return results

    def _final_tie(
        self, best: tuple[float, list[int]], second: tuple[float, list[int]], margin: float
    ) -> bool:
        """Two final hypotheses whose scores, in nats over the best one's length, are within
        ``margin``."""
        return bool((best[0] - second[0]) * max(len(best[1]), 1) ** self.length_penalty < margin)
