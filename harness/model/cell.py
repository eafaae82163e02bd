"""A cell: one batch size x beam width combination under test."""

from __future__ import annotations

from dataclasses import dataclass


def is_captured(size: int) -> bool:
    """Whether a batch size is on a CUDA-graph ladder of powers of two (1, 2, 4, 8, ...)."""
    return size & (size - 1) == 0


def captured_below(size: int) -> int:
    """The largest power of two below ``size`` (0 for 1): where a batch padded up to the next
    captured size starts its padded-in entries."""
    return 1 << (size - 1).bit_length() - 1 if size > 1 else 0


@dataclass(frozen=True)
class Cell:
    """One batch size x beam width combination."""

    batch_size: int
    beam_width: int

    @property
    def id(self) -> str:
        return f"bs{self.batch_size}-beam{self.beam_width}"

    @classmethod
    def from_id(cls, cell_id: str) -> Cell:
        """``bs8-beam4`` -> Cell(8, 4); ValueError for anything else."""
        size, sep, beam = cell_id.removeprefix("bs").partition("-beam")
        if not (cell_id.startswith("bs") and sep and size.isdigit() and beam.isdigit()):
            raise ValueError(f"{cell_id!r} is not a cell id like bs8-beam4")
        return cls(int(size), int(beam))
