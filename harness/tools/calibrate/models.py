"""The engines calibrate builds, what is true of each, and the run each models.

Every fault model (harness/engines/emulator/faults.py), the healthy engine, benign drift at
several rates, every fault on top of 30% drift, the beam-slot overflow of the incident, and the
sweep models (graph-ladder, beam-buffer, each also on drift, and a drifting healthy engine),
swept to ``--sweep-to`` as ``--sweep`` does. Each model's ``design`` is the grid of the run it
stands for, which sizes its Holm family as that run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from harness.config.basics import DEFAULT_BEAM_WIDTHS
from harness.engines.emulator.build import build_limits
from harness.engines.emulator.faults import IN_FLIGHT_ONLY, Fault, FaultKind
from harness.model.cell import Cell
from harness.model.limits import EngineLimits
from harness.model.vocab import Condition, FindingKind, Word
from harness.plan import grid
from harness.tools.calibrate.settings import SWEEP_TO

POOL_SEED = 20261130  # the prompt pool is fixed; --seed drives rounds and trials
DRIFT_UNDER = 0.3  # the drift every fault model is also calibrated on top of
DRIFT_RATES = (0.1, 0.3, 0.6)
LATE_SHARE = 0.2  # late-loss: the share of batched outputs that lose their last third
# slot-cut sweeps this far at least: with the 64 prompts of a trial a sparse sweep to 12 seats
# 5-6 prompts per position, the fewest a sparse plan allows (harness.plan.SPARSE_MIN)
CUT_TO = 12
CUT_KEEP = 0.75  # slot-cut: every output at its position loses its last quarter


class Target(Word):
    """What calibrate expects of a model."""

    DETECT = "detect"  # fail exactly the damaged positions, naming the signature
    PASS = "pass"  # never fail (healthy, benign drift)
    PARTIAL = "partial"  # fail the position a share of prompts is damaged at
    UNIFORM = "uniform"  # fail: damage at every position alike
    SPREAD = "spread"  # fail the engine: mild damage in every batched cell, none alone enough


@dataclass(frozen=True)
class Model:
    """One engine under calibration: how it is built, which cells it runs, what is true."""

    name: str
    label: str
    fault: Fault | None
    cells: tuple[Cell, ...]
    damaged: dict[Cell, frozenset[int]]  # the truly damaged positions per cell
    pattern: FindingKind | None  # the signature harness.verdict.signatures should name
    drift: float = 0.0  # benign drift rate built in (0: none)
    limits: EngineLimits = field(default_factory=build_limits)
    rounds: int = 1
    extra: tuple[Cell, ...] = ()  # cells borrowed from the undamaged twin (untouched by the fault)
    twin: str = "healthy"  # the same engine without the fault: partial's unhit prompts, extras
    target: Target = Target.DETECT
    sweep: bool = False  # a --sweep to limits.max_batch_size (sparse rotation, its family)
    # an in-flight fault (bulk cells pass it): the condition its damaged requests share, which a
    # failing scheduled cell should name
    flight: Condition | None = None

    @property
    def should_fail(self) -> bool:
        return any(self.damaged.values())

    @property
    def fails_in_flight(self) -> bool:
        """Its scheduled cells should fail: an in-flight fault."""
        return self.fault is not None and self.fault.kind in IN_FLIGHT_ONLY

    def boundary(self, beam_width: int) -> int | None:
        """The first damaged batch size of a beam width (None: every size passes)."""
        return min(
            (c.batch_size for c, d in self.damaged.items() if c.beam_width == beam_width and d), default=None
        )

    def design(self) -> tuple[Cell, ...]:
        """The grid of the run this model stands for: the default grid capped at its engine's
        max_batch_size, or, for a sweep, every batch size up to it at every default beam width
        the engine runs (``--sweep --beam-widths`` of those)."""
        top = self.limits.max_batch_size
        if not self.sweep:
            return grid(None, DEFAULT_BEAM_WIDTHS, top)
        widths = tuple(w for w in DEFAULT_BEAM_WIDTHS if w <= (self.limits.max_beam_width or 1))
        return grid(None, widths, top, sweep=True)


def _all(b: int) -> frozenset[int]:
    return frozenset(range(b))


def on_drift(m: Model, twin: str) -> Model:
    """``m`` built on an engine that also drifts at DRIFT_UNDER."""
    return replace(
        m,
        name=f"{m.name}+drift",
        label=f"{m.label} + {DRIFT_UNDER:.0%} drift",
        drift=DRIFT_UNDER,
        rounds=1,
        twin=twin,
    )


def _sweep(
    name: str,
    label: str,
    fault: Fault | None,
    beam_width: int,
    damaged: dict[int, frozenset[int]],
    pattern: FindingKind | None,
    to: int,
    drift: float = 0.0,
) -> Model:
    """A --sweep of every batch size 2..``to`` at one beam width, on an engine built for
    max_batch_size ``to`` x max_beam_width ``beam_width``; ``damaged`` by batch size (sizes not
    given are undamaged)."""
    limits = build_limits(max_batch_size=to, max_beam_width=beam_width)
    cells = tuple(Cell(b, beam_width) for b in range(2, to + 1))
    return Model(
        name,
        label,
        fault,
        cells,
        {c: damaged.get(c.batch_size, frozenset()) for c in cells},
        pattern,
        drift=drift,
        limits=limits,
        sweep=True,
        target=Target.DETECT if damaged else Target.PASS,
    )


def ladder_damage(size: int) -> frozenset[int]:
    """Graph ladder (faults.py's table): a size off the powers of two runs in the graph of the
    next one up, and its entries from the power of two below it on are damaged."""
    below = 1
    while below * 2 < size:
        below *= 2
    return frozenset() if size == below * 2 else frozenset(range(below, size))


def buffer_damage(size: int, width: int, slots: int) -> frozenset[int]:
    """Beam buffer (faults.py's table): the entries whose last beam slot lies past ``slots``."""
    return frozenset(p for p in range(size) if (p + 1) * width > slots)


def odd_size(to: int) -> int:
    """The largest batch size up to ``to`` that is not a power of two (the slot-cut model's:
    its positions see about the fewest prompts in a sparse sweep)."""
    return max((b for b in range(3, to + 1) if b & (b - 1)), default=to)


def sweep_models(to: int = SWEEP_TO) -> tuple[Model, ...]:
    """The threshold faults under --sweep to ``to``, each alone and on 30% drift, a slot cut
    at one position of one batch size off the powers of two (alone and on drift), and a
    drifting healthy engine swept."""
    sizes = range(2, to + 1)
    wide = max(to, CUT_TO)
    odd = odd_size(wide - 1)  # not the full batch, whose damage reads as full-batch corruption
    slot = odd - 2  # a middle-to-late entry, neither the first nor the last
    cut = _sweep(
        "slot-cut",
        f"slot cut {1 - CUT_KEEP:.0%}, bs{odd} pos {slot} (1-{wide})",
        Fault(FaultKind.SLOT_CUT, batch=odd, position=slot, keep=CUT_KEEP),
        1,
        {odd: frozenset({slot})},
        FindingKind.SINGLE,
        wide,
    )
    ladder = _sweep(
        "graph-ladder",
        f"graph ladder (sweep 1-{to})",
        Fault(FaultKind.GRAPH_LADDER),
        1,
        {b: ladder_damage(b) for b in sizes},
        FindingKind.GRAPH_LADDER,
        to,
    )
    buffer = _sweep(
        "beam-buffer",
        f"beam buffer, beam 2 (sweep 1-{to})",
        Fault(FaultKind.BEAM_BUFFER),
        2,
        {b: buffer_damage(b, 2, to) for b in sizes},
        FindingKind.BEAM_BUFFER,
        to,
    )
    drifting = _sweep(
        f"sweep-drift-{DRIFT_UNDER:g}",
        f"benign drift {DRIFT_UNDER:.0%} (sweep 1-{to})",
        None,
        1,
        {},
        None,
        to,
        drift=DRIFT_UNDER,
    )
    under = f"drift-{DRIFT_UNDER:g}"
    return (
        ladder,
        buffer,
        cut,
        on_drift(ladder, under),
        on_drift(buffer, under),
        on_drift(cut, under),
        drifting,
    )


def models(rounds: int, fraction: float, position: int, sweep_to: int = SWEEP_TO) -> tuple[Model, ...]:
    """The engines calibrate runs, with their cells and the damage each must show."""
    c81, c41, c82, c42, c44 = Cell(8, 1), Cell(4, 1), Cell(8, 2), Cell(4, 2), Cell(4, 4)
    drifts = tuple(
        Model(
            f"drift-{r:g}",
            f"benign drift {r:.0%}",
            None,
            (c81, c42),
            {c81: frozenset(), c42: frozenset()},
            None,
            drift=r,
            rounds=rounds,
            target=Target.PASS,
        )
        for r in DRIFT_RATES
    )
    faults = (
        Model(
            "overflow",
            "beam-slot overflow (8x1 slots)",
            None,
            (c82, c44),
            {c82: frozenset(range(4, 8)), c44: frozenset({2, 3})},
            FindingKind.OVERFLOW,
            limits=build_limits(max_beam_width=1),
        ),
        Model(
            "full-batch",
            "full-batch corruption",
            Fault(FaultKind.FULL_BATCH),
            (c81, c41),
            {c81: frozenset({7}), c41: frozenset()},
            FindingKind.FULL_BATCH,
        ),
        Model(
            "padding",
            "padding bug",
            Fault(FaultKind.PADDING),
            (c81,),
            {c81: _all(8)},
            FindingKind.PADDING,
            rounds=rounds,
        ),
        Model(
            "stride",
            "uneven-finish stride",
            Fault(FaultKind.STRIDE),
            (c82,),
            {c82: frozenset(range(1, 8)), c81: frozenset()},
            FindingKind.STRIDE,
            rounds=rounds,
            extra=(c81,),
        ),
    )
    partial = Model(
        "partial",
        f"partial ({fraction:.0%} at position {position})",
        Fault(FaultKind.PARTIAL, position=position, fraction=1.0),
        (c81,),
        {c81: frozenset({position})},
        FindingKind.PARTIAL,
        target=Target.PARTIAL,
    )
    uniform = Model(
        "truncate",
        "uniform damage (cut short)",
        Fault(FaultKind.TRUNCATE),
        (c81, c42),
        {c81: _all(8), c42: _all(4)},
        FindingKind.ALL_POSITIONS,
        target=Target.UNIFORM,
    )
    # the default grid's batched cells: the engine-wide test pools them all, as a run does
    batched = tuple(c for c in grid(None, DEFAULT_BEAM_WIDTHS, 8) if c.batch_size > 1)
    spread = Model(
        "late-loss",
        f"late loss ({LATE_SHARE:.0%} of outputs, last 1/3)",
        Fault(FaultKind.LATE_LOSS, fraction=LATE_SHARE),
        batched,
        {c: _all(c.batch_size) for c in batched},
        FindingKind.SPREAD,
        target=Target.SPREAD,
    )
    healthy = Model(
        "healthy", "healthy", None, (c81, c82), {c81: frozenset(), c82: frozenset()}, None, target=Target.PASS
    )
    in_flight = tuple(
        replace(healthy, name=kind.value, label=f"{label} (in flight)", fault=Fault(kind), flight=named)
        for kind, label, named in IN_FLIGHT_FAULTS
    )
    under = f"drift-{DRIFT_UNDER:g}"
    return (
        healthy,
        *drifts,
        *faults,
        *(on_drift(m, under) for m in faults),
        partial,
        on_drift(partial, under),
        uniform,
        spread,
        *in_flight,
        *sweep_models(sweep_to),
    )


# the in-flight faults (faults.py IN_FLIGHT_ONLY): what each is, and the condition its damaged
# requests share
IN_FLIGHT_FAULTS = (
    (FaultKind.STALE_SLOT, "stale state on a refilled slot", Condition.FREED_SLOT),
    (FaultKind.PREFILL_CORRUPT, "chunked prefill corrupts decoders", Condition.BESIDE_PREFILL),
    (FaultKind.WARM_CACHE, "warm cache serves damaged blocks", Condition.CACHED),
    (FaultKind.INFLIGHT_GRAPH, "graph padding by requests in flight", Condition.PAST_GRAPH),
)


def flight_models(everything: Sequence[Model]) -> tuple[Model, ...]:
    """The models calibrate runs under the schedules: the healthy engine, benign drift at every
    rate (among requests that share decode steps), and every in-flight fault alone and on
    DRIFT_UNDER drift."""
    passing = [m for m in everything if m.fault is None and m.target == Target.PASS and not m.sweep]
    faults = [m for m in everything if m.fault is not None and m.fault.kind in IN_FLIGHT_ONLY]
    under = f"drift-{DRIFT_UNDER:g}"
    return (*passing, *faults, *(on_drift(m, under) for m in faults))
