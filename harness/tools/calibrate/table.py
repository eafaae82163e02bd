"""Calibrate's verdict on itself: each model's rates against its targets, as a printed table,
what each engine did to its outputs, and a one-line summary."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.model.cell import Cell
from harness.model.vocab import Rotation
from harness.tools.calibrate.inflight import SCHEDULES, FlightOutcome
from harness.tools.calibrate.models import Model, Target
from harness.tools.calibrate.settings import Settings
from harness.verdict.decide import family_size
from harness.verdict.statistics import ENGINE_SHARE, SCHEDULE_SHARE


@dataclass(frozen=True)
class Outcome:
    """One model's rates over all trials, and what its engine did to the outputs."""

    model: Model
    trials: int
    flagged: int
    exact: int
    named: int
    wrong: int = 0  # trials in which a finding named another signature than the model's
    boundary: int = 0  # trials in which every beam width's first failing size was the true one
    differing: dict[Cell, float] = field(default_factory=dict)  # share unlike batch size 1
    quality_delta: dict[Cell, float] = field(default_factory=dict)  # vs batch size 1, pool mean
    # per trial: the sequences sent (screen and follow-up) over the fixed design's (empty: not sparse)
    cost: tuple[float, ...] = ()

    @property
    def cost_text(self) -> str:
        """The median cost against the fixed design, and the largest (- where not sparse)."""
        if not self.cost:
            return "-"
        return f"{statistics.median(self.cost):.2f}x/{max(self.cost):.2f}x"

    @property
    def flagged_rate(self) -> float:
        return self.flagged / self.trials

    @property
    def exact_rate(self) -> float:
        return self.exact / self.trials

    @property
    def named_rate(self) -> float:
        return self.named / self.trials

    @property
    def boundary_rate(self) -> float:
        return self.boundary / self.trials


@dataclass(frozen=True)
class Targets:
    """The issue's targets (defaults)."""

    false_alarm: float = 0.01
    detection: float = 0.99
    exact: float = 0.95
    partial_detection: float = 0.95
    boundary: float = 0.95  # sweeps: the first failing batch size found exactly
    spread: float = 0.95  # mild damage spread over every batched cell: the engine fails
    cost: float = 1.5  # sweeps: sequences at most this many times the fixed sparse design's
    # the sequential design, median sequences over the fixed design's: faulty engines, healthy
    # ones without drift (with drift: never more than the fixed design)
    faulty_cost: float = 0.4
    healthy_cost: float = 0.7
    # the scheduled cells (issue 33): each in-flight fault detected on every schedule it damages,
    # its damaged requests named exactly by its condition; healthy and drifting engines pass
    flight_detection: float = 0.95
    flight_exact: float = 0.95

    def check_flight(self, o: FlightOutcome) -> tuple[bool, str]:
        """An in-flight model's rates against its targets."""
        if not o.should_fail:
            return o.failed / o.trials <= self.false_alarm, f"fails the run <= {self.false_alarm:.0%}"
        said = f"detected >= {self.flight_detection:.0%}, exact >= {self.flight_exact:.0%}"
        detected = o.detected / o.trials >= self.flight_detection
        return detected and o.exact / o.trials >= self.flight_exact, said

    def check(self, o: Outcome, sequential: bool = False) -> tuple[bool, str]:
        ok, said = self._check(o)
        if o.model.sweep and o.cost:
            ok, said = ok and max(o.cost) <= self.cost, f"{said}, sequences <= {self.cost:g}x"
        elif sequential and o.cost:
            ok, said = self._cost(o, ok, said)
        if o.model.target == Target.SPREAD:
            # damage alike at every position: a position's own finding is a false rejection
            # of a true null there, which Holm bounds by alpha, as on a healthy engine
            allowed = o.wrong / o.trials <= self.false_alarm
            return ok and allowed, f"{said}, a cause named <= {self.false_alarm:.0%}"
        if o.wrong:
            return False, f"{said}, no cause named wrong ({o.wrong} trials named one)"
        return ok, said

    def _cost(self, o: Outcome, ok: bool, said: str) -> tuple[bool, str]:
        """The sequential design's cost targets."""
        median = statistics.median(o.cost)
        if o.model.should_fail:
            return ok and median <= self.faulty_cost, f"{said}, median sequences <= {self.faulty_cost:g}x"
        if not o.model.drift:
            return ok and median <= self.healthy_cost, f"{said}, median sequences <= {self.healthy_cost:g}x"
        return ok and max(o.cost) <= 1.0, f"{said}, sequences <= 1x"

    def _check(self, o: Outcome) -> tuple[bool, str]:
        target = o.model.target
        if target == Target.PASS:
            ok = o.flagged_rate <= self.false_alarm
            if o.model.sweep:
                return (
                    ok and o.boundary_rate >= self.boundary,
                    f"flagged <= {self.false_alarm:.0%}, no boundary >= {self.boundary:.0%}",
                )
            return ok, f"flagged <= {self.false_alarm:.0%}"
        if target == Target.PARTIAL:
            if o.model.drift:
                return True, "reported (no target with drift)"
            return (o.flagged_rate >= self.partial_detection, f"detected >= {self.partial_detection:.0%}")
        if target == Target.UNIFORM:
            return o.flagged_rate >= self.detection, f"detected >= {self.detection:.0%}"
        if target == Target.SPREAD:
            return o.flagged_rate >= self.spread, f"detected >= {self.spread:.0%}"
        ok = o.flagged_rate >= self.detection and o.exact_rate >= self.exact
        said = f"detected >= {self.detection:.0%}, exact >= {self.exact:.0%}"
        if o.model.sweep:
            return (ok and o.boundary_rate >= self.boundary, f"{said}, boundary >= {self.boundary:.0%}")
        return ok, said


def _cells_text(m: Model) -> str:
    """A model's cells as the table shows them: a sweep as its range of sizes."""
    if m.sweep:
        return ",".join(
            f"bs2-{m.limits.max_batch_size}-beam{w}" for w in sorted({c.beam_width for c in m.cells})
        )
    if len(m.cells) > 4:
        return f"{len(m.cells)} batched cells"
    return ",".join(c.id for c in m.cells)


def table(outcomes: Sequence[Outcome], s: Settings, targets: Targets) -> tuple[list[str], bool]:
    """The printed table, what each engine did to its outputs, the varying-factors note and the
    one-line summary; and whether every target holds."""
    lines = [
        f"{'model':40} {'cells':16} {'expect':6} {'flagged':>8} {'exact':>7} {'named':>7} "
        f"{'wrong':>6} {'bound.':>7} {'seqs':>11}  target"
    ]
    ok_all = True
    for o in outcomes:
        ok, target = targets.check(
            o, sequential=s.looks > 1 and s.rotation == Rotation.FULL and not o.model.sweep
        )
        ok_all &= ok
        m = o.model
        exact = f"{o.exact_rate:7.1%}" if m.target == Target.DETECT else f"{'-':>7}"
        named = f"{o.named_rate:7.1%}" if m.pattern else f"{'-':>7}"
        bound = f"{o.boundary_rate:7.1%}" if m.sweep else f"{'-':>7}"
        lines.append(
            f"{m.label:40} {_cells_text(m):16} "
            f"{'fail' if m.should_fail else 'pass':6} {o.flagged_rate:8.1%} {exact} "
            f"{named} {o.wrong / o.trials:6.1%} {bound} {o.cost_text:>11}  {target}: "
            f"{'ok' if ok else 'MISSED'}"
        )
    lines += [
        "",
        "what each engine did to its outputs (pool of "
        f"{s.pool}): share unlike batch size 1's; mean quality against the references "
        "minus batch size 1's",
    ]
    for o in outcomes:
        lines.append(
            f"  {o.model.label:38} "
            + "; ".join(
                f"{c.id} {o.differing[c]:.0%} differ, quality {o.quality_delta[c]:+.4f}"
                for c in o.model.cells
            )
        )
    grid_models = [o.model for o in outcomes if not o.model.sweep]
    family = family_size(grid_models[0].design(), references=True) if grid_models else None
    lines += ["", _note(s, family)]
    lines.append(_summary(outcomes, s, ok_all))
    return lines, ok_all


def flight_table(outcomes: Sequence[FlightOutcome], s: Settings, targets: Targets) -> tuple[list[str], bool]:
    """The scheduled cells' table (module harness.tools.calibrate.inflight), its note and a
    one-line summary; and whether every target holds."""
    if not outcomes:
        return [], True
    heads = "".join(f" {sc.value[:7]:>7}" for sc in SCHEDULES)
    lines = [
        "in flight: the scheduled cells (C = max_batch_size 8, beam width 1)",
        f"{'model':48} {'expect':6} {'fails':>6} {'detect':>7} {'named':>7} {'exact':>7} {'wrong':>6}"
        f"  changed:{heads}  target",
    ]
    ok_all = True
    for o in outcomes:
        ok, target = targets.check_flight(o)
        ok_all &= ok
        m = o.model
        rate = [
            f"{x / o.trials:7.1%}" if o.should_fail else f"{'-':>7}" for x in (o.detected, o.named, o.exact)
        ]
        changed = "".join(f" {o.changed[sc]:7.0%}" for sc in SCHEDULES)
        lines.append(
            f"{m.label:48} {'fail' if o.should_fail else 'pass':6} {o.failed / o.trials:6.1%} {' '.join(rate)} "
            f"{o.wrong / o.trials:6.1%}          {changed}  {target}: {'ok' if ok else 'MISSED'}"
        )
    lines += [
        "",
        f"each trial: per schedule and arrival rank, the request of that rank from one of {s.flight_rounds} rounds "
        f"(each: {s.prompts} prompts drawn from the pool in a fresh order, sent on every schedule to an engine with "
        "its own drift seed, scored against batch size 1 on it; warm: against its cold run), every cell judged "
        f"in the run's Holm family at the scheduled tests' share of alpha ({SCHEDULE_SHARE:g}; the bulk tests' "
        "share held by clean ones, as a bulk cell cannot see these faults). fails = a scheduled cell failed or did not happen; detect = a scheduled cell failed on its "
        "scores; named = a failing cell names the fault's condition and none another; exact = named, and no "
        "failing cell has a damaged request outside it (on drift: but those its drifting twin, same round, "
        "damaged too); wrong = a failing cell names another condition; changed = the rounds' outputs unlike "
        "their comparison's. The bulk table's rows of the same names hold their bulk cells.",
    ]
    healthy = [o for o in outcomes if not o.should_fail]
    faults = [o for o in outcomes if o.should_fail]
    summary = "calibrate in flight: false alarms " + (
        ", ".join(f"{o.failed / o.trials:.1%} {o.model.name}" for o in healthy) or "n/a"
    )
    worst = min(faults, key=lambda o: o.detected, default=None)
    if worst is not None:
        summary += f"; worst detection {worst.detected / worst.trials:.1%} ({worst.model.name})"
        least = min(faults, key=lambda o: o.exact)
        summary += f"; worst exact naming {least.exact / least.trials:.1%} ({least.model.name})"
    lines.append(summary + f"; {s.trials} trials; " + ("all targets met" if ok_all else "TARGETS MISSED"))
    return lines, ok_all


def _note(s: Settings, family: int | None) -> str:
    rounds = (
        f"for every position and prompt, one of the model's rotation rounds (own shuffle "
        f"and drift seed; {s.rounds} for benign drift, padding and stride, 1 otherwise)"
        if s.rounds > 1
        else "one rotation round per model (own shuffle and drift seed)"
    )
    return (
        f"each trial: {s.prompts} prompts drawn from a pool of {s.pool} generated ones; "
        f"{rounds}; for partial, which prompts are hit at position {s.position} (each with "
        f"probability {s.fraction:.0%}). Holm family of {family or '-'} tests "
        f"(the default grid's, the engine-wide test weighted {ENGINE_SHARE:g} of the bulk tests' "
        f"alpha; tests outside the model's cells count as clean; the scheduled cells' tests "
        f"hold {SCHEDULE_SHARE:g} of alpha, clean for bulk models). tolerance "
        f"{s.tolerance}, alpha {s.alpha}, max_new_tokens {s.max_new_tokens}, seed {s.seed}, "
        f"{s.rotation} rotation"
        + (" (each prompt at one position per cell)" if s.rotation == Rotation.SPARSE else "")
        + f". Sweep models (bs2-{s.sweep_to}): every batch size 2..{s.sweep_to} at the sweep's "
        "cost (sparse rotation: each prompt at one position per size) with the sweep's Holm "
        "family (every default beam width the engine runs). flagged = the model's grid "
        "fails; exact = every cell's degraded positions are exactly the damaged ones; named "
        "= the failure names the right signature; wrong = a finding names another (a target "
        "on every model: none); bound. = every beam width's first failing batch size is the "
        "true one (none for a healthy engine); seqs = sequences sent over the fixed design's, median/largest "
        f"(sparse: screen and follow-up, --follow-up {s.follow_up:g}; full rotation: the looks that ran, "
        f"--looks {s.looks})."
        + (
            f" --horizon {s.horizon:g}: each full-rotation model decided over only the first {s.horizon:.1%} of "
            "every cell's rotation batches, at the whole alpha: the most any look at that point could find"
            if s.horizon < 1.0
            else ""
        )
    )


def _summary(outcomes: Sequence[Outcome], s: Settings, ok_all: bool) -> str:
    healthy = [o for o in outcomes if o.model.target == Target.PASS]
    faults = [
        o
        for o in outcomes
        if o.model.should_fail and not (o.model.target == Target.PARTIAL and o.model.drift)
    ]
    fa = ", ".join(f"{o.flagged_rate:.1%} {o.model.name}" for o in healthy) or "n/a"
    summary = f"calibrate: false alarms {fa}"
    worst = min(faults, key=lambda o: o.flagged_rate, default=None)
    if worst is not None:
        summary += f"; worst detection {worst.flagged_rate:.1%} ({worst.model.name})"
    worst_exact = min(
        (o for o in faults if o.model.target == Target.DETECT), key=lambda o: o.exact_rate, default=None
    )
    if worst_exact is not None:
        summary += f"; worst exact localization {worst_exact.exact_rate:.1%} ({worst_exact.model.name})"
    worst_boundary = min((o for o in outcomes if o.model.sweep), key=lambda o: o.boundary_rate, default=None)
    if worst_boundary is not None:
        summary += f"; worst sweep boundary {worst_boundary.boundary_rate:.1%} ({worst_boundary.model.name})"
    return summary + f"; {s.trials} trials; " + ("all targets met" if ok_all else "TARGETS MISSED")
