"""Cells (batch size x beam width) and rotation batches.

Within a cell, prompts are shuffled once (seeded) into a ring; batch k holds the B prompts
starting at ring index k. Over the N batches of a cell every prompt sits at every position
exactly once, and every batch is full, for any N >= B. Comparing a position with batch
size 1 over the same prompts therefore removes prompt difficulty from the comparison.

``--rotation sparse`` is the cheap mode for pull-request checks: a cell takes only every
B-th of those batches (ceil(N / B) batches), so each prompt sits at one position per cell
(when B does not divide N, the last batch wraps around and a few prompts sit at two) and
the cell costs about N sequences instead of N x B. Each position is still compared
with batch size 1 on the same prompts (paired), but over N / B prompts only; its detection
and false-alarm rates are in docs/method.md.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from harness.config.basics import DEFAULT_BATCH_SIZES
from harness.errors import ConfigError
from harness.model.cell import Cell
from harness.model.vocab import Rotation


@dataclass(frozen=True)
class Batch:
    """One engine call: document indices in position order."""

    cell: Cell
    index: int
    documents: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """Cells under test plus the batch-size-1 reference cell of every beam width."""

    cells: tuple[Cell, ...]
    reference_cells: tuple[Cell, ...]
    order: tuple[int, ...]
    seed: int
    rotation: Rotation = Rotation.FULL

    def batches(self, cell: Cell) -> list[Batch]:
        """The N rotation batches of a cell (full), or every B-th of them (sparse)."""
        n, b = len(self.order), cell.batch_size
        step = b if self.rotation == Rotation.SPARSE else 1
        return [Batch(cell, k, tuple(self.order[(k + j) % n] for j in range(b))) for k in range(0, n, step)]

    def follow_up(self, cell: Cell, rounds: int) -> list[Batch]:
        """The batches a sparse cell's follow-up spends (harness.verdict.follow_up): ``rounds``
        more rounds of its rotation, each the batches starting at one more ring offset, spread
        between the sparse ones. Each round seats at every position about N / B prompts that
        never sat there, so the follow-up's outputs are new evidence at every position."""
        n, b = len(self.order), cell.batch_size
        taken = min(rounds, b - 1)
        offsets = {round((r + 1) * b / (taken + 1)) for r in range(taken)}
        return [
            Batch(cell, k, tuple(self.order[(k + j) % n] for j in range(b)))
            for k in range(n)
            if k % b in offsets
        ]

    def follow_up_cost(self, cell: Cell, rounds: int) -> int:
        """Sequences a cell's follow-up of ``rounds`` rounds sends."""
        return len(self.follow_up(cell, rounds)) * cell.batch_size

    def follow_up_budget(self, share: float) -> int:
        """The sequences a follow-up may spend: ``share`` of the screen's (this plan's)."""
        return math.floor(share * self.sequences())

    @property
    def all_cells(self) -> tuple[Cell, ...]:
        """Every cell in the order it is generated: by beam width, and within one width the
        batch-size-1 reference first (the baseline its cells are scored against), then the
        cells under test. Grouped by width because an engine's decoder serves one beam width
        per load (a TensorRT-LLM runner is reloaded when the width changes)."""
        extra = tuple(c for c in self.cells if c not in self.reference_cells)
        return tuple(
            sorted(self.reference_cells + extra, key=lambda c: (c.beam_width, c not in self.reference_cells))
        )

    def shard(self, index: int, count: int) -> Plan:
        """The plan of shard ``index`` (1-based) of ``count``: its cells (see ``shard_cells``) plus
        the batch-size-1 reference cell of each beam width among them, which every shard
        generates for itself because its baseline level comes from it."""
        cells = shard_cells(self.cells, index, count)
        widths = {c.beam_width for c in cells}
        return Plan(
            cells=cells,
            reference_cells=tuple(c for c in self.reference_cells if c.beam_width in widths),
            order=self.order,
            seed=self.seed,
            rotation=self.rotation,
        )

    def describe(self) -> str:
        """One line printed before the run: what the plan costs, and in the other mode."""
        other = Rotation.SPARSE if self.rotation == Rotation.FULL else Rotation.FULL
        alt = Plan(self.cells, self.reference_cells, self.order, self.seed, other)
        batches = sum(len(self.batches(c)) for c in self.all_cells)
        tested = len(self.cells)
        baseline = [c.id for c in self.reference_cells if c not in self.cells]
        extra = f" and the batch-size-1 baseline {', '.join(baseline)}" if baseline else ""
        return (
            f"plan: {self.sequences():,} sequences in {batches:,} batches over {tested} "
            f"cell{'s' if tested != 1 else ''} under test{extra} ({self.rotation} rotation; "
            f"--rotation {other} would need {alt.sequences():,} sequences)"
        )

    def seats(self, cell: Cell) -> Iterator[tuple[int, int]]:
        """Every (position, document) a batch of ``cell`` seats."""
        for batch in self.batches(cell):
            yield from enumerate(batch.documents)

    def shortfall(self, cell: Cell, lengths: Sequence[int]) -> tuple[tuple[int, ...], ...]:
        """For every position and document of ``cell``: how many tokens shorter the prompt was
        than the longest prompt of its batch (the padding it needed; 0 where it never sat)."""
        out = [[0] * len(self.order) for _ in range(cell.batch_size)]
        for batch in self.batches(cell):
            longest = max(lengths[d] for d in batch.documents)
            for position, doc in enumerate(batch.documents):
                out[position][doc] = longest - lengths[doc]
        return tuple(tuple(row) for row in out)

    def sequences(self) -> int:
        """Number of prompts sent to the engine over the whole plan."""
        return sum(len(self.batches(c)) * c.batch_size for c in self.all_cells)


def choose_batch_sizes(
    requested: tuple[int, ...] | None, max_batch_size: int | None, *, sweep: bool = False, engine: str = ""
) -> tuple[int, ...]:
    """The requested batch sizes; with --sweep every size up to the engine's max_batch_size;
    else the default grid capped at it."""
    if requested is not None:
        return requested
    if sweep:
        if max_batch_size is None:
            raise ConfigError(
                f"--sweep: {engine} records no max_batch_size (no TensorRT-LLM config.json); bound "
                "the sweep yourself with --batch-sizes 1-N --rotation sparse"
            )
        return tuple(range(1, max_batch_size + 1))
    if max_batch_size is None:
        return DEFAULT_BATCH_SIZES
    capped = tuple(b for b in DEFAULT_BATCH_SIZES if b <= max_batch_size)
    return capped or (max_batch_size,)


def cells_for(batch_sizes: tuple[int, ...], beam_widths: tuple[int, ...]) -> tuple[Cell, ...]:
    """Cells in report order: by beam width, then batch size."""
    return tuple(Cell(b, w) for w in beam_widths for b in batch_sizes)


def grid(
    batch_sizes: tuple[int, ...] | None,
    beam_widths: tuple[int, ...],
    max_batch_size: int | None,
    *,
    sweep: bool = False,
    engine: str = "",
) -> tuple[Cell, ...]:
    """Every cell of a run's grid (before --shard picks its part), from the options and the
    engine's max_batch_size (``choose_batch_sizes``)."""
    return cells_for(choose_batch_sizes(batch_sizes, max_batch_size, sweep=sweep, engine=engine), beam_widths)


SPARSE_MIN = 5  # prompts per position below which --rotation sparse is refused


def make_plan(
    batch_sizes: tuple[int, ...],
    beam_widths: tuple[int, ...],
    num_documents: int,
    seed: int,
    rotation: Rotation = Rotation.FULL,
) -> Plan:
    """Cells and the seeded ring order of documents."""
    largest = max(batch_sizes)
    if num_documents < largest:
        raise ConfigError(
            f"--batch-sizes {','.join(map(str, batch_sizes))}: batch size {largest} needs at least "
            f"{largest} prompts so that every batch holds distinct prompts, but the dataset has "
            f"{num_documents}; use a larger --dataset or smaller --batch-sizes"
        )
    if rotation == Rotation.SPARSE and num_documents < SPARSE_MIN * largest:
        raise ConfigError(
            f"--rotation sparse: batch size {largest} with {num_documents} prompts leaves "
            f"{num_documents // largest} prompt(s) per position, and a position needs at least "
            f"{SPARSE_MIN} to be tested; use at least {SPARSE_MIN * largest} prompts, smaller "
            "--batch-sizes, or --rotation full"
        )
    rotation = Rotation(rotation)
    order = list(range(num_documents))
    random.Random(seed).shuffle(order)
    cells = cells_for(batch_sizes, beam_widths)
    reference = tuple(Cell(1, w) for w in beam_widths)
    return Plan(cells=cells, reference_cells=reference, order=tuple(order), seed=seed, rotation=rotation)


def shard_cells(cells: tuple[Cell, ...], index: int, count: int) -> tuple[Cell, ...]:
    """The cells of shard ``index`` (1-based) of ``count``, in the order given.

    Deterministic and balanced by work: cells are dealt largest first (batch size x beam
    width, then report order) to the shard with the least work so far, ties to the lower
    shard number. Every cell lands in exactly one shard.
    """
    if not 1 <= index <= count:
        raise ConfigError(f"--shard {index}/{count}: K must be between 1 and N")
    if count > len(cells):
        raise ConfigError(
            f"--shard {index}/{count}: the grid has {len(cells)} cell(s) "
            f"({', '.join(c.id for c in cells)}), so {count} shards would leave "
            f"some empty; use at most {len(cells)} shards"
        )
    load = [0] * count
    owner: dict[Cell, int] = {}
    for i in sorted(range(len(cells)), key=lambda i: (-cells[i].batch_size * cells[i].beam_width, i)):
        k = min(range(count), key=lambda s: (load[s], s))
        owner[cells[i]] = k + 1
        load[k] += cells[i].batch_size * cells[i].beam_width
    return tuple(c for c in cells if owner[c] == index)
