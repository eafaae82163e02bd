"""A cell: one batch size x beam width combination under test."""

from __future__ import annotations

from dataclasses import dataclass


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
