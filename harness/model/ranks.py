"""Where this process sits in a multi-process (MPI) run, as the report records it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ranks:
    """Rank ``rank`` of ``world_size`` processes, and the launcher variables that said so."""

    rank: int = 0
    world_size: int = 1
    source: str = "a single process"

    @property
    def is_root(self) -> bool:
        """Rank 0: the process that scores, asserts and writes the report."""
        return self.rank == 0

    @property
    def label(self) -> str:
        return f"rank {self.rank} of {self.world_size}"
