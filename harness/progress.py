"""How a run shows its progress while it generates: a bar on a terminal; in a log (a CI job's
output, piped), a line at a steady interval with the sequences done, the rate and the time
left, since a bar there is either invisible or a wall of carriage returns."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

Progress = Callable[[int], object]  # told how many more sequences are done; its result is ignored
ProgressFactory = Callable[[int], Progress]  # the total number of sequences -> a Progress

LINE_INTERVAL_S = 30.0  # a log gets a progress line at most this often


def duration(seconds: float) -> str:
    """12 s, 9 min 45 s, 2 h 05 min."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass
class ProgressLines:
    """A Progress for a log: ``write`` gets a line once ``interval`` seconds have passed since
    the last one (sequences done of the total, rate, time left), and one when all are done."""

    total: int
    write: Callable[[str], object]
    interval: float = LINE_INTERVAL_S
    clock: Callable[[], float] = time.monotonic
    done: int = 0
    start: float = field(init=False)
    last: float = field(init=False)

    def __post_init__(self) -> None:
        self.start = self.last = self.clock()

    def __call__(self, sequences: int) -> None:
        self.done += sequences
        now = self.clock()
        elapsed = now - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.done >= self.total:
            self.write(
                f"progress: all {self.total:,} sequences generated in {duration(elapsed)}"
                f" ({rate:.1f} sequences/s)"
            )
        elif now - self.last >= self.interval:
            self.last = now
            left = f", about {duration((self.total - self.done) / rate)} left" if rate > 0 else ""
            self.write(
                f"progress: {self.done:,} of {self.total:,} sequences "
                f"({self.done / self.total:.0%}), {rate:.1f} sequences/s{left}"
            )


def progress_factory(
    write: Callable[[str], object], *, terminal: bool, quiet: bool = False
) -> ProgressFactory:
    """A tqdm bar on stderr for a terminal (none when ``quiet``); lines through ``write`` for
    anything else."""

    def factory(total: int) -> Progress:
        if not terminal:
            return ProgressLines(total, write)
        import sys

        from tqdm import tqdm

        from harness.outside import unfiltered

        # the bar is the harness's own text and needs its carriage returns: it bypasses the
        # terminal gate that outside text goes through (harness.outside)
        bar = tqdm(
            total=total,
            unit="seq",
            desc="generating",
            disable=quiet,
            leave=False,
            file=unfiltered(sys.stderr),
        )
        return bar.update

    return factory
