"""The options of the schedule axis: which arrival schedules run besides the bulk cells, and at
what concurrency (harness.stages.schedules; docs/method.md "Schedules")."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.bounds import Range
from harness.config.option import option
from harness.config.parse import positive_int
from harness.model.vocab import Receiver, Schedule

IN_FLIGHT = tuple(s for s in Schedule if s != Schedule.BULK)  # the schedules besides bulk
NONE = "none"
MAX_CONCURRENCY = 1024


def schedule_list(flag: str, bound: Range | None = None) -> Callable[[str], tuple[Schedule, ...]]:
    """A parser of ``--schedules``: comma-separated schedules, or ``none`` (bulk cells only)."""

    def parse(value: str) -> tuple[Schedule, ...]:
        words = [w.strip() for w in value.split(",") if w.strip()]
        if words == [NONE] or words == [Schedule.BULK.value]:
            return ()
        unknown = [w for w in words if w not in {s.value for s in IN_FLIGHT}]
        if unknown or not words:
            raise argparse.ArgumentTypeError(
                f"{flag} {value!r}: expected a comma-separated list of {', '.join(IN_FLIGHT)}, or {NONE}"
            )
        return tuple(s for s in IN_FLIGHT if s.value in words)

    return parse


@dataclass(frozen=True)
class ScheduleOptions:
    """Which in-flight schedules run and at what concurrency."""

    schedules: tuple[Schedule, ...] = option(
        IN_FLIGHT,
        "--schedules",
        "arrival schedules run besides the bulk cells, each prompt sent into the engine's running batch and "
        "compared with batch size 1: comma-separated from staggered, refill, prefill-mix, warm, or none "
        "(default {default}; not applicable where the engine has no in-flight path; see docs/method.md)",
        Receiver.PLAN,
        parse=schedule_list,
        metavar="LIST",
    )
    concurrency: int | None = option(
        None,
        "--concurrency",
        "the most requests a schedule keeps in flight (default: the largest batch size of the grid)",
        Receiver.PLAN,
        parse=positive_int,
        bound=Range(None, MAX_CONCURRENCY, "requests in flight at once"),
        metavar="C",
    )

    def concurrency_for(self, batch_sizes: Sequence[int]) -> int:
        """``--concurrency``, else the largest batch size of the grid (at least 2)."""
        return self.concurrency or max(2, *batch_sizes)

    def describe(
        self, batch_sizes: Sequence[int], prompts: int, beam_widths: Sequence[int], *, cached: bool
    ) -> str | None:
        """The line said before a run: what the scheduled cells may send besides the plan
        (``cached``: the run has a generation cache, which replays a rerun's passes)."""
        chosen = [x for x in self.schedules if x != Schedule.BULK]
        if not chosen:
            return None
        per_width = prompts * (len(chosen) + (Schedule.WARM in chosen and Schedule.REFILL not in chosen))
        return (
            f"schedules: {', '.join(chosen)} at concurrency {self.concurrency_for(batch_sizes)}: up to "
            f"{per_width * len(beam_widths):,} more requests ({per_width:,} per beam width its in-flight path "
            "decodes), sent in flight"
            + (
                "; a rerun of the same engine replays them from the generation cache, as it does batches"
                if cached
                else ""
            )
            + " (--schedules none: bulk cells only)"
        )
