"""What the analysis decides: the tests, each position's figures, each cell's answer to the
three questions, and the fault signature a failing cell matches (docs/method.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.model.cell import Cell
from harness.model.scores import finite, mean
from harness.model.vocab import FindingKind, Verdict

P_FLOOR = 1e-12  # reports keep p-values to 12 decimals: smaller ones are shown as below it


def shown_p(p: float | None) -> str:
    """A p-value as the report and the terminal show it: two significant digits, "< 1e-12"
    below what the report keeps (never "0"), "–" where there is none."""
    if p is None:
        return "–"
    return f"< {P_FLOOR:.0e}" if p < P_FLOOR else f"{p:.2g}"


@dataclass(frozen=True)
class DropTest:
    """One one-sided test: is the mean drop larger than the tolerance?"""

    drop: float  # mean paired drop (positive: worse)
    p_value: float
    n: int
    p_adjusted: float | None = None  # Holm over every test of the run
    flagged: bool = False  # drop > tolerance and p_adjusted < alpha
    # the standard error of the mean paired drop (None: not a paired test of a mean): what the
    # sequential design's futility bound reads (harness.verdict.sequential)
    se: float | None = None


@dataclass(frozen=True)
class PositionStats:
    """One batch position of one cell: the three questions' figures.

    - position dependence: agreement with the baseline here against the other positions of
      the same cell, same prompts (``position_test``);
    - batch-size quality: ROUGE-L against the references here against batch size 1, same
      prompts (``quality_test``; None without reference summaries);
    - determinism: the share of outputs that differ from batch size 1's (``differing``) and
      the agreement with the baseline (``agreement``), a gate only with --deterministic;
    - sparse, large damage: more outputs changed here than at the other positions
      (``change_test``), counted only where the position's own figures show a loss.
    """

    position: int
    n: int
    agreement: float  # mean ROUGE-L against the baseline
    ci_low: float | None  # 95% t-interval of the mean agreement
    ci_high: float | None
    agreement_drop: float  # mean paired drop of agreement below batch size 1's
    differing: float  # share of outputs that differ from batch size 1's
    quality: float | None  # mean ROUGE-L against the references (None: no references)
    quality_bs1: float | None  # the same prompts at batch size 1
    position_test: DropTest | None = None  # batch size > 1
    quality_test: DropTest | None = None  # batch size > 1, with references
    # batch size > 1: more outputs changed from batch size 1's here than at the other
    # positions (drop: the excess share; counts only where the position also lost, see
    # ``shows_loss``)
    change_test: DropTest | None = None
    degraded: bool = False  # a test flagged it (set once Holm's correction is applied)
    nondeterministic: bool = False  # --deterministic and an output differs
    # share of outputs with no text ROUGE-L can score (empty, blank, only punctuation or
    # symbols, or not text): any fails the cell, since
    # every test is relative to batch size 1 and an engine that returns nothing at every
    # batch size would otherwise pass
    empty: float = 0.0
    # the sparse rotation's follow-up of a suspicious position (harness.verdict.follow_up): its
    # figures and tests over the follow-up's prompts alone, flagged in the follow-up's own
    # Holm family; it degrades the position as the screen's tests do (None: not followed up)
    follow_up: PositionStats | None = None

    def shows_loss(self, tolerance: float) -> bool:
        """The position's own figures show a loss beyond the tolerance: agreement below the
        other positions' and, where the run has references, quality below batch size 1's. A
        flagged change test degrades a position only then: outputs that changed more often
        here without losing anything are drift, not damage."""
        p, q = self.position_test, self.quality_test
        return p is not None and p.drop > tolerance and (q is None or q.drop > tolerance)

    def degraded_by(self, flagged: Callable[[DropTest], bool], tolerance: float) -> bool:
        """Whether the tests degrade this position, given how a test's flag is decided: the
        position or the quality test flags, or the change test does where the position shows
        a loss."""

        def hit(t: DropTest | None) -> bool:
            return t is not None and flagged(t)

        return (
            hit(self.position_test)
            or hit(self.quality_test)
            or (hit(self.change_test) and self.shows_loss(tolerance))
        )

    @property
    def shown(self) -> float:
        """The figure a position is shown and compared by: its quality against the references
        where the run measured it, else its agreement with the baseline."""
        return self.quality if self.quality is not None else self.agreement


@dataclass(frozen=True)
class CellAnalysis:
    """One cell's answer to the three questions: its positions after Holm's correction, the
    omnibus test over them, the verdict (pass | fail) and its one-line message."""

    cell: Cell
    level: float  # mean agreement of batch size 1 with the baseline, same beam width
    positions: tuple[PositionStats, ...]
    verdict: Verdict
    message: str
    omnibus: DropTest | None = None  # quality drop over all positions (damage spread thinly)
    drift: str | None = None  # outputs differ from batch size 1 without losing quality
    # the smallest mean quality drop at one position this run detects with 80% power (the
    # least sensitive position; None: no references, or batch size 1)
    detectable: float | None = None

    @property
    def degraded_positions(self) -> tuple[int, ...]:
        return tuple(s.position for s in self.positions if s.degraded)

    @property
    def nondeterministic_positions(self) -> tuple[int, ...]:
        """--deterministic only: positions where an output differs from batch size 1's."""
        if self.cell.batch_size == 1:
            return ()
        return tuple(s.position for s in self.positions if s.nondeterministic)

    @property
    def empty_positions(self) -> tuple[int, ...]:
        """Positions where an output has no text ROUGE-L can score."""
        return tuple(s.position for s in self.positions if s.empty > 0)

    @property
    def quality(self) -> float | None:
        """Mean ROUGE-L against the references over the positions (None: no references)."""
        values = finite([s.quality for s in self.positions if s.quality is not None])
        return mean(values) if values else None

    @property
    def quality_bs1(self) -> float | None:
        values = finite([s.quality_bs1 for s in self.positions if s.quality_bs1 is not None])
        return mean(values) if values else None

    @property
    def differing(self) -> float:
        """The share of the cell's outputs that differ from batch size 1's."""
        return mean([s.differing for s in self.positions]) if self.positions else 0.0

    @property
    def spread(self) -> bool:
        """The omnibus test failed the cell while no single position did."""
        return self.omnibus is not None and self.omnibus.flagged and not self.degraded_positions


@dataclass(frozen=True)
class EngineWide:
    """Question 2 over the whole engine: every batched output (each cell with batch size > 1,
    each position) against batch size 1 at its beam width, pooled per prompt. Damage too mild
    for any one cell's tests, spread over every cell, shows here (docs/method.md)."""

    test: DropTest  # per prompt: batch size 1's quality minus its batched outputs' mean
    cells: tuple[str, ...]  # the cells pooled
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.test.flagged


@dataclass(frozen=True)
class RunAnalysis:
    """Every cell's analysis and the engine-wide test (None: fewer than two batched cells or
    no reference summaries), all under one Holm family."""

    cells: tuple[CellAnalysis, ...]
    engine_wide: EngineWide | None = None
    # the scheduled cells' tests' adjusted p-values, in the order given (harness.verdict.schedules)
    scheduled: tuple[float, ...] = ()


def cell_fails(degraded: bool, omnibus: bool, nondeterministic: bool, empty: bool) -> bool:
    """A cell fails on a degraded position, on its omnibus test (damage spread thinly), under
    --deterministic on an output that differs from batch size 1's, or on an output with no
    text: every test is relative to batch size 1, so an engine that returns no text at every
    batch size would pass them all."""
    return degraded or omnibus or nondeterministic or empty


@dataclass(frozen=True)
class Finding:
    """A named fault signature and the sentence that goes into the failure and the report."""

    kind: FindingKind
    text: str
    evidence: str = ""  # what the named cause rests on

    @property
    def cause(self) -> str:
        """How the report and the failure name it."""
        return f"likely cause ({self.kind}): {self.text}"


@dataclass(frozen=True)
class FollowUp:
    """What a sparse screen's follow-up spent (harness.verdict.follow_up): the ``--follow-up``
    share, the sequences it could spend and did, the rounds of each followed cell (by id), the
    suspicious cells the budget left without one, and the share of alpha its family held."""

    share: float
    budget: int
    spent: int = 0
    rounds: dict[str, int] = field(default_factory=dict)
    left: tuple[str, ...] = ()
    confirm_share: float = 0.0


@dataclass(frozen=True)
class Looks:
    """What the sequential design of a full-rotation run spent (harness.verdict.sequential):
    its looks, the share of alpha the interim looks spent and the futility level over them, the
    sequences generated against the fixed design's, the look each cell was settled at (the
    last look: it ran to the end), and whether the run stopped with the engine-wide test neither
    shown failing nor clean (a cell failed first, which fails the run whatever that test says)."""

    looks: int
    interim_share: float
    beta: float
    spent: int
    fixed: int
    decided: dict[str, int] = field(default_factory=dict)
    engine_open: bool = False
