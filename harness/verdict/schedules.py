"""The verdict of scheduled cells (``--schedules``; docs/method.md "Schedules").

Each request of a scheduled cell is paired with the same prompt at batch size 1 (``warm``:
with its own cold run): the drop of its quality against the reference summary, or, without
references, of its agreement with the baseline. A cell is tested as a whole, and over the
requests of each condition it has on some but not all of its requests (a freed slot, a long
prompt beside it, a cached prompt): damage that only refilled slots suffer shows in that
group first. Every test of every scheduled cell is in the run's one Holm family with the bulk
cells' tests, holding SCHEDULE_SHARE of its alpha (``harness.verdict.decide``); a test flags
where its drop is beyond the tolerance and its adjusted p-value below alpha.

A schedule counts only where it happened: where too few requests joined a running batch
(an engine faster than the arrivals, a server that answered one by one), the cell is
untested with the reason, never passed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.model.analysis import DropTest
from harness.model.schedule import GroupTest, ScheduledCell, ServedRequest
from harness.model.vocab import Condition, Schedule, Served, Verdict
from harness.verdict.statistics import SCHEDULE_SHARE, confined_p, joint_holm, paired_test

MIN_GROUP = 5  # requests a condition needs before its own group is tested
JOINED_SHARE = 0.5  # of the requests after the first, joined a running batch: the schedule happened
# a changed output whose drop is at least this lost content (quality against the references),
# where its drift would move it by a few hundredths; without references, its agreement with
# the baseline fell by at least DAMAGE_AGREEMENT
DAMAGE = 0.1
DAMAGE_AGREEMENT = 0.5
# a condition sets the damaged requests apart when the share of them it holds, less the share
# of the other requests damaged, is at least this, and so few damaged fell outside it by chance
# less often than CONFINED_P (a condition all but a few requests hold covers the damage by
# holding everything: its few others say nothing)
SEPARATES = 0.5
CONFINED_P = 0.05
REPLAYED = (
    " (replayed from the generation cache; --no-cache sends them again)"  # a replayed cell's line ends so
)


@dataclass(frozen=True)
class Drive:
    """What one schedule's run gave before it is judged: its requests (scored, conditions set),
    the most requests in flight at once, and what the engine said of its cache (``warm``)."""

    schedule: Schedule
    beam_width: int
    concurrency: int
    requests: tuple[ServedRequest, ...]
    peak: int
    cache: str | None = None
    # how the engine answered a first wave sent at once, where it timed its requests
    # (harness.engines.batching; None: not judged): one after another is a queue, not a batch
    served: Served | None = None
    replayed: bool = False  # its requests as a run with the same cache key sent them


@dataclass(frozen=True)
class Flights:
    """A run's scheduled cells before the decision: the drives to judge, the cells that could
    not run (decided already: not applicable, the engine's error), and the share of alpha the
    drives' tests hold in the run's Holm family (``harness.stages.schedules.planned``)."""

    drives: tuple[Drive, ...] = ()
    fixed: tuple[ScheduledCell, ...] = ()
    share: float = 0.0

    def cells(self, decided: Sequence[ScheduledCell]) -> tuple[ScheduledCell, ...]:
        """Every scheduled cell, the ``decided`` drives' with the fixed ones, by beam width and
        schedule."""
        return tuple(
            sorted((*decided, *self.fixed), key=lambda c: (c.beam_width, list(Schedule).index(c.schedule)))
        )


def drop(request: ServedRequest) -> float | None:
    """The request's paired drop: quality against the references below its comparison's, else
    agreement with the baseline below its comparison's (None: neither scored)."""
    if request.quality is not None and request.quality_bs1 is not None:
        return request.quality_bs1 - request.quality
    if request.agreement is not None and request.agreement_bs1 is not None:
        return request.agreement_bs1 - request.agreement
    return None


def is_damaged(request: ServedRequest) -> bool:
    """A changed output that lost content, not one that drifted (see DAMAGE)."""
    d = drop(request)
    if not request.changed or d is None:
        return False
    by_quality = request.quality is not None and request.quality_bs1 is not None
    return d >= (DAMAGE if by_quality else DAMAGE_AGREEMENT)


def joined_share(requests: Sequence[ServedRequest]) -> float | None:
    """The share of requests after the first sent while another was in flight."""
    later = [r for r in requests if r.rank > 0]
    return sum(r.in_flight > 0 for r in later) / len(later) if later else None


def not_happened(drive: Drive) -> str | None:
    """Why the schedule did not happen as planned (None: it did)."""
    share = joined_share(drive.requests)
    if drive.served == Served.ONE_AFTER_ANOTHER:
        return (
            "the engine answered requests sent together one after another (a queue, not a running batch: "
            "their answers' timing, harness.engines.batching)"
        )
    if drive.schedule == Schedule.WARM:
        return None  # a second pass over the same prompts: no overlap asked of it
    if share is None or share < JOINED_SHARE:
        return (
            f"only {0 if share is None else share:.0%} of the requests after the first joined a running batch "
            f"(at most {drive.peak} in flight at once); the engine answered faster than the requests "
            "arrived, or served them one by one"
        )
    if drive.schedule == Schedule.PREFILL_MIX:
        long = [r for r in drive.requests if Condition.LONG_PREFILL in r.conditions]
        if not long:
            return "no long prompt was sent while others were decoding"
    return None


def _groups(requests: Sequence[ServedRequest], tolerance: float) -> list[GroupTest]:
    """A test per condition held by at least MIN_GROUP requests but not by all of them."""
    out = []
    for condition in Condition:
        held = [r for r in requests if condition in r.conditions]
        drops = [d for r in held if (d := drop(r)) is not None]
        if len(drops) >= MIN_GROUP and len(held) < len(requests):
            out.append(GroupTest(condition, paired_test(drops, tolerance)))
    return out


@dataclass(frozen=True)
class Separation:
    """Which requests of a failing cell were damaged, and the condition that sets them apart
    from the healthy ones (None: none does), as one sentence."""

    condition: Condition | None
    text: str


Gaps = dict[Condition, tuple[float, float, str]]


def _gaps(requests: Sequence[ServedRequest]) -> Gaps:
    """Per condition that confines the damage (CONFINED_P): the share of the damaged it holds
    less the damaged share outside it, the damaged share inside it, and the sentence that says
    so."""
    hit = sum(r.damaged for r in requests)
    out = {}
    for condition in Condition:
        inside = [r for r in requests if condition in r.conditions]
        outside = [r for r in requests if condition not in r.conditions]
        a, b = sum(r.damaged for r in inside), sum(r.damaged for r in outside)
        if hit and inside and outside and confined_p(b, len(outside), hit, len(requests)) < CONFINED_P:
            text = f"damaged: {a} of {len(inside)} requests that {_verb(condition)}; {b} of {len(outside)} others"
            out[condition] = (a / hit - b / len(outside), a / len(inside), text)
    return out


def consensus(failing: Sequence[Gaps]) -> dict[Condition, float]:
    """How well each condition sets the damaged requests apart over every failing cell of a
    run: its mean gap (0 where it does not split a cell). A cause is the engine's, not one
    schedule's: where two conditions set one cell's damage apart alike (every request after a
    first wave took a freed slot, and was beside a long prompt), the one that does so in the
    other failing cells is named (``failing``: each failing cell's ``_gaps``)."""
    return {c: sum(g[c][0] for g in failing if c in g) / len(failing) for c in Condition} if failing else {}


def separating(
    requests: Sequence[ServedRequest],
    schedule: Schedule,
    prefer: Mapping[Condition, float] | None = None,
    gaps: Gaps | None = None,
) -> Separation | None:
    """The condition that best sets the damaged requests apart (the share of the damaged it
    holds less the damaged share outside it; ties: the run's ``consensus``, then the fewer
    healthy requests it holds), e.g. "damaged: 22 of 24 requests that took a freed slot; 0 of 8
    others" (None: none damaged). A ``warm`` cell whose requests were all served from cache
    names the cache: it is what its comparison with the cold run changes. ``gaps``: the
    requests' ``_gaps``, where already computed."""
    hit = sum(r.damaged for r in requests)
    if not hit:
        return None
    gaps = _gaps(requests) if gaps is None else gaps
    rank = {c: (gap, (prefer or {}).get(c, 0.0), share) for c, (gap, share, _) in gaps.items()}
    best = max(rank, key=lambda c: rank[c], default=None)
    if best is not None and rank[best][0] >= SEPARATES:
        return Separation(best, gaps[best][2])
    common = [c for c in Condition if all(c in r.conditions for r in requests)]
    if schedule == Schedule.WARM and Condition.CACHED in common:
        return Separation(
            Condition.CACHED,
            f"damaged: {hit} of {len(requests)} requests, each served from cache, against their cold run",
        )
    shared = f" (all requests {' and '.join(_verb(c) for c in common)})" if common else ""
    return Separation(
        None, f"damaged: {hit} of {len(requests)} requests, no condition setting them apart{shared}"
    )


def _verb(condition: Condition) -> str:
    """A condition as what a request did: "took a freed slot", "were sent in the first wave"."""
    return {
        Condition.FIRST_WAVE: "were sent in the first wave",
        Condition.JOINED: "joined a running batch",
        Condition.FREED_SLOT: "took a freed slot",
        Condition.LONG_PREFILL: "were long prompts sent while others decoded",
        Condition.BESIDE_PREFILL: "were in flight while a long prompt was prefilled",
        Condition.CACHED: "were served from cache",
        Condition.PAST_GRAPH: "ran past a captured graph size (a row of a step padded up to the next one)",
    }[condition]


def _flag(test: DropTest, adjusted: float, tolerance: float, alpha: float) -> DropTest:
    return dataclasses.replace(test, p_adjusted=adjusted, flagged=test.drop > tolerance and adjusted < alpha)


@dataclass(frozen=True)
class Examined:
    """One drive with its tests before Holm: the whole cell's, one per condition it splits,
    and why the schedule did not happen (None: it did; then its tests are in the family)."""

    drive: Drive
    whole: DropTest | None
    groups: tuple[GroupTest, ...]
    why: str | None

    @property
    def tests(self) -> list[DropTest]:
        """The tests this cell adds to the run's Holm family."""
        if self.why is not None:
            return []
        return [t for t in (self.whole, *[g.test for g in self.groups]) if t is not None]


def examine(drives: Sequence[Drive], tolerance: float) -> list[Examined]:
    """Each drive's tests, before Holm."""
    out = []
    for drive in drives:
        drops = [d for r in drive.requests if (d := drop(r)) is not None]
        whole = paired_test(drops, tolerance) if len(drops) >= 2 else None
        out.append(Examined(drive, whole, tuple(_groups(drive.requests, tolerance)), not_happened(drive)))
    return out


def family_p_values(examined: Sequence[Examined]) -> list[float]:
    """The p-values the scheduled cells add to the run's Holm family, in order."""
    return [t.p_value for e in examined for t in e.tests]


def share_of(cells: Sequence[ScheduledCell], recorded: float | None) -> tuple[float, str | None]:
    """The share of alpha a report's scheduled tests held (``recorded``: its method's), and
    what is wrong with it (None: nothing): SCHEDULE_SHARE where the run asked for scheduled
    cells, which any cell but a not-applicable one shows it did; none (or SCHEDULE_SHARE) where
    none ran or every one was not applicable."""
    share = recorded or 0.0
    sent = any(c.verdict != Verdict.NOT_APPLICABLE for c in cells)
    if share not in (0.0, SCHEDULE_SHARE):
        return (
            SCHEDULE_SHARE,
            f"method.schedule_share {share}, but the method gives scheduled cells {SCHEDULE_SHARE}",
        )
    if sent and share == 0.0:
        return SCHEDULE_SHARE, (
            f"method.schedule_share {recorded}, but these scheduled cells ran: the method gives them {SCHEDULE_SHARE}"
        )
    return share, None


def settle(
    examined: Sequence[Examined],
    adjusted: Sequence[float],
    tolerance: float,
    alpha: float,
    deterministic: bool = False,
) -> tuple[ScheduledCell, ...]:
    """The scheduled cells, decided from their tests' ``adjusted`` p-values (``family``'s
    order, corrected with the run's other tests: ``harness.verdict.decide``) at ``alpha``;
    with ``deterministic`` (--deterministic, a batch-invariant engine) an output that changed
    fails its cell too."""
    held = iter(adjusted)
    out = []
    for e in examined:
        drive, whole, groups, why = e.drive, e.whole, list(e.groups), e.why
        requests = tuple(dataclasses.replace(r, damaged=is_damaged(r)) for r in drive.requests)
        if why is None:
            whole = whole and _flag(whole, next(held), tolerance, alpha)
            groups = [GroupTest(g.condition, _flag(g.test, next(held), tolerance, alpha)) for g in groups]
        changed = deterministic and any(r.changed for r in requests)
        failed = why is None and (
            bool(whole and whole.flagged) or any(g.test.flagged for g in groups) or changed
        )
        verdict = Verdict.UNTESTED if why else Verdict.FAIL if failed else Verdict.PASS
        out.append(
            ScheduledCell(
                schedule=drive.schedule,
                beam_width=drive.beam_width,
                concurrency=drive.concurrency,
                verdict=verdict,
                message=_message(drive, whole, groups, why, requests, changed)
                + (REPLAYED if drive.replayed else ""),
                requests=requests,
                test=whole,
                groups=tuple(groups),
                overlap=joined_share(requests),
                peak=drive.peak,
                cache=drive.cache,
                served=drive.served,
                replayed=drive.replayed,
            )
        )
    return _separated(out)


def judge(
    drives: Sequence[Drive], tolerance: float, alpha: float, deterministic: bool = False
) -> tuple[ScheduledCell, ...]:
    """Scheduled cells decided where the run's bulk tests are clean: in the run's family at
    SCHEDULE_SHARE of ``alpha``, the bulk tests' share held by a clean test (calibrate's
    in-flight trials, whose fault models the bulk cells cannot see)."""
    examined = examine(drives, tolerance)
    _, adjusted = joint_holm([], [], family_p_values(examined), SCHEDULE_SHARE)
    return settle(examined, adjusted, tolerance, alpha, deterministic)


def _separated(cells: list[ScheduledCell]) -> tuple[ScheduledCell, ...]:
    """Each failing cell with the condition that sets its damaged requests apart, ties broken
    by the run's ``consensus``."""
    gaps = {i: _gaps(c.requests) for i, c in enumerate(cells) if c.verdict == Verdict.FAIL}
    prefer = consensus(list(gaps.values()))
    out = list(cells)
    for i, held in gaps.items():
        found = separating(cells[i].requests, cells[i].schedule, prefer, held)
        if found is not None:
            out[i] = dataclasses.replace(cells[i], separation=found.text, separated_by=found.condition)
    return tuple(out)


def _message(
    drive: Drive,
    whole: DropTest | None,
    groups: Sequence[GroupTest],
    why: str | None,
    requests: Sequence[ServedRequest],
    deterministic_fail: bool = False,
) -> str:
    """The cell's one line: what was compared, and what it found."""
    against = "their cold run" if drive.schedule == Schedule.WARM else "batch size 1"
    if why is not None:
        return f"untested: {why}"
    if whole is None:
        return f"nothing scored against {against}"
    changed = sum(r.changed for r in requests)
    head = (
        f"{len(requests)} requests against {against}: mean drop {whole.drop:.3f}, {changed} outputs changed"
    )
    flagged = [g for g in groups if g.test.flagged]
    if deterministic_fail and not (whole.flagged or flagged):
        return f"{head}; under --deterministic every output must be batch size 1's"
    if not (whole.flagged or flagged):
        return f"{head}; no loss beyond the tolerance"
    worst = max(flagged, key=lambda g: g.test.drop, default=None)
    where = (
        ""
        if worst is None
        else f"; worst: requests that {_verb(worst.condition)}, drop {worst.test.drop:.3f}"
    )
    return f"{head}; degraded{where}"


def decided_again(
    cells: Sequence[ScheduledCell],
    tolerance: float,
    alpha: float,
    deterministic: bool = False,
    *,
    bulk: Sequence[float] = (),
    weights: Sequence[float] = (),
    share: float = SCHEDULE_SHARE,
) -> list[str]:
    """Every recorded decision of the judged scheduled cells that does not follow from their
    own requests (their tests again, corrected with the run's bulk tests ``bulk`` of relative
    ``weights`` at ``share``, decided at ``alpha``): what ``harness.report.audit`` says."""
    judged = [c for c in cells if c.verdict in (Verdict.PASS, Verdict.FAIL, Verdict.UNTESTED)]
    out = [
        f"{c.id}: {c.verdict}, but it holds {len(c.requests)} requests"
        for c in cells
        if c not in judged and c.requests
    ]
    drives = [
        Drive(c.schedule, c.beam_width, c.concurrency, c.requests, c.peak or 0, c.cache, c.served)
        for c in judged
    ]
    examined = examine(drives, tolerance)
    _, adjusted = joint_holm(bulk, weights, family_p_values(examined), share)
    for cell, again in zip(judged, settle(examined, adjusted, tolerance, alpha, deterministic)):
        for what in ("verdict", "test", "groups", "separation", "separated_by", "damaged", "overlap"):
            if getattr(cell, what) != getattr(again, what):
                out.append(
                    f"{cell.id}: {what} {getattr(cell, what)}, but its requests make it {getattr(again, what)}"
                )
    return out
