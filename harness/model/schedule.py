"""What a scheduled cell measured and decided (``--schedules``, harness.verdict.schedules):
each request's place in the running engine (arrival, times, slot, cache) and scores, and the
cell's answer: do requests sent into a running batch lose quality against batch size 1?"""

from __future__ import annotations

from dataclasses import dataclass

from harness.model.analysis import DropTest
from harness.model.vocab import Condition, Schedule, Served, Verdict


def schedule_id(schedule: Schedule, concurrency: int, beam_width: int) -> str:
    """A scheduled cell's id, as the report and the per-cell tests name it: refill-c8-beam1."""
    return f"{schedule}-c{concurrency}-beam{beam_width}"


@dataclass(frozen=True)
class GroupTest:
    """The paired test over the requests of one condition (a freed slot, a long prompt beside
    them, ...): damage confined to a share of the requests shows here before the whole cell."""

    condition: Condition
    test: DropTest


@dataclass(frozen=True)
class ServedRequest:
    """One request of a scheduled cell, in arrival order.

    ``sent`` and ``answered`` are seconds from the cell's first request; ``in_flight`` counts
    the cell's other requests sent and not yet answered when it was sent; ``slot`` and
    ``cached_tokens`` are what the engine said (None: it does not say); ``slot_reused``:
    whether that slot had served another request of this run before (None: no slot said).
    Scores: ROUGE-L against the baseline (``agreement``) and the reference summary
    (``quality``), the same prompt's at batch size 1 (``quality_bs1``; for ``warm``: its cold
    run's), and whether the output differs from that one's text (``changed``)."""

    document: str
    rank: int
    sent: float
    answered: float
    in_flight: int
    slot: int | None = None
    slot_reused: bool | None = None
    cached_tokens: int | None = None
    conditions: tuple[Condition, ...] = ()
    agreement: float | None = None
    agreement_bs1: float | None = None
    quality: float | None = None
    quality_bs1: float | None = None
    changed: bool = False
    damaged: bool = False  # changed and lost content (harness.verdict.schedules.DAMAGE)


@dataclass(frozen=True)
class ScheduledCell:
    """One schedule at one beam width: its requests, its paired test against batch size 1 (the
    cold run for ``warm``), and its verdict and message. ``overlap``: the share of requests after
    the first that were sent while another of the cell's was in flight (a schedule counts only
    where it happened); ``separation``: which requests were damaged and what sets them apart,
    ``separated_by`` that condition."""

    schedule: Schedule
    beam_width: int
    concurrency: int
    verdict: Verdict
    message: str
    requests: tuple[ServedRequest, ...] = ()
    test: DropTest | None = None
    groups: tuple[GroupTest, ...] = ()
    overlap: float | None = None
    peak: int | None = None  # the most requests in flight at once
    separation: str | None = None
    separated_by: Condition | None = None  # the condition ``separation`` names (None: none)
    cache: str | None = None  # warm: what the engine said it serves a repeated prompt from
    # how the engine answered a first wave sent at once (harness.engines.batching; None: not judged)
    served: Served | None = None
    # its requests replayed from the generation cache, as a run with the same key sent them
    # (harness.stages.recorded; --no-cache sends them again)
    replayed: bool = False

    @property
    def id(self) -> str:
        return schedule_id(self.schedule, self.concurrency, self.beam_width)

    @property
    def damaged(self) -> tuple[str, ...]:
        """The documents whose requests lost content."""
        return tuple(r.document for r in self.requests if r.damaged)

    def count(self, condition: Condition) -> int:
        """How many of its requests ran under ``condition``."""
        return sum(condition in r.conditions for r in self.requests)

    @property
    def changed(self) -> int:
        """How many outputs differ from their comparison's text."""
        return sum(r.changed for r in self.requests)
