"""The report: everything report.json holds, in its order. The report stage builds it from a
run; the writers, ``compare`` and ``merge`` read it (``harness.report.serialize`` turns it into
JSON and back)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.model.analysis import DropTest, EngineWide, FollowUp, Looks, PositionStats
from harness.model.cell import Cell
from harness.model.dataset import DatasetInfo
from harness.model.engine import EngineInfo
from harness.model.json import JsonObject
from harness.model.limits import EngineLimits, LimitCheck, MemoryBudget
from harness.model.ranks import Ranks
from harness.model.schedule import ScheduledCell
from harness.model.scores import CellScores, Levels
from harness.model.vocab import FindingKind, Question, Rotation, Verdict

SCHEMA_VERSION = 2  # 2: the three questions (position dependence, batch-size quality, determinism)
HASH_METHOD = "sha256 of this JSON without 'integrity', keys sorted, separators (',', ':'), UTF-8"
HMAC_METHOD = "HMAC-SHA256 with the key in HARNESS_SIGNING_KEY over the bytes the sha256 covers"


@dataclass
class Timing:
    """Where a run's time goes; every figure in seconds (see docs/performance.md)."""

    engine_generate_s: float = 0.0  # wall time inside engine.generate, summed
    engine_calls: int = 0
    engine_load_s: float = 0.0  # loading the engine (and the golden engine) in prepare()
    prepare_s: float = 0.0  # prepare(): dataset, engine load, preflight, goldens check
    generate_stage_s: float = 0.0  # wall time of the generation loop (engine + cache + hand-off)
    scoring_s: float = 0.0  # ROUGE-L CPU time, summed over cells (overlapped or not)
    scoring_overlapped: bool = False
    after_generation_s: float = 0.0  # end of generation -> analysis done (what overlap shortens)
    harness_total_s: float = 0.0  # start of prepare() -> analysis done (report writing excluded)
    schedules_s: float = 0.0  # wall time of the scheduled cells (harness.stages.schedules)
    merged_shards: int | None = None  # a merged report: how many shard timings were summed


@dataclass
class CacheStats:
    """What the generation cache did during one run."""

    folder: str | None
    enabled: bool
    reason: str
    batches_from_cache: int = 0
    batches_generated: int = 0
    generations_from_cache: int = 0
    # entries found but not used: damaged, edited after written, or another engine's or batch's
    batches_rejected: int = 0
    key: JsonObject = field(default_factory=dict)  # what the fingerprint covers (cache_key)
    # scheduled passes replayed as a run recorded them (harness.stages.schedules)
    passes_from_cache: int = 0

    def tally(self) -> str:
        """What came from the cache and what was generated, as the run's summary says it."""
        replayed = (
            f", {self.passes_from_cache} scheduled pass{'' if self.passes_from_cache == 1 else 'es'} replayed"
            if self.passes_from_cache
            else ""
        )
        return (
            f"{self.generations_from_cache} generations from the cache, {self.batches_generated} batches "
            f"generated{replayed}"
        )


@dataclass(frozen=True)
class Example:
    """One prompt at a degraded position whose output differs from the baseline."""

    position: int
    id: str
    prompt: str
    baseline: str
    output: str


@dataclass(frozen=True)
class CellResult:
    """Everything known about one cell under test: its verdict, the figures of its positions,
    the fault signature its damage matches (``cause``, ``pattern``, ``evidence``), its build
    limit checks and, in a report, examples of its worst position."""

    id: str
    batch_size: int
    beam_width: int
    verdict: Verdict
    limits_verdict: Verdict  # fail: the cell exceeds a build limit
    error: str | None  # the engine could not run the cell
    message: str  # the analysis's one line (the error's, for an engine error)
    cause: str | None
    pattern: FindingKind | None
    evidence: str | None  # what the named cause rests on
    baseline_level: float | None
    quality: float | None
    quality_bs1: float | None
    differing: float | None
    drift: str | None  # outputs that differ without losing quality: a finding, not a failure
    degraded_positions: tuple[int, ...]
    nondeterministic_positions: tuple[int, ...]
    omnibus: DropTest | None
    positions: tuple[PositionStats, ...]
    limit_checks: tuple[LimitCheck, ...]
    examples: tuple[Example, ...] = ()
    # the engine did not run the cell as asked (a server that answered its batches one request
    # at a time): the positions were not exercised, so the cell cannot pass
    notice: str | None = None
    # the smallest mean quality drop at one position this run detects with 80% power (None: no
    # references, batch size 1, or an engine error)
    detectable_drop: float | None = None

    @property
    def cell(self) -> Cell:
        return Cell(self.batch_size, self.beam_width)

    @property
    def headline(self) -> str:
        """The message as findings show it: after the notice when the engine did not run the
        cell as asked."""
        return f"{self.id}: {self.notice} ({self.message})" if self.notice else self.message


def cell_verdict(*, error: bool, failed: bool, notice: bool) -> Verdict:
    """A cell's verdict: an engine error, else a failing test, else untested when the engine
    did not run the cell as asked (a pass there would not mean the positions were exercised),
    else pass."""
    if error:
        return Verdict.ERROR
    if failed:
        return Verdict.FAIL
    return Verdict.UNTESTED if notice else Verdict.PASS


def run_verdict(
    cells: Sequence[CellResult],
    engine_wide: EngineWide | None = None,
    scheduled: Sequence[ScheduledCell] = (),
) -> Verdict:
    """A run passes when every cell passes, no build limit is exceeded, the engine-wide
    test does not fail and no scheduled cell fails (``schedules_fail``)."""
    bad = any(c.verdict != Verdict.PASS or c.limits_verdict == Verdict.FAIL for c in cells)
    failed = bad or (engine_wide is not None and engine_wide.failed) or schedules_fail(scheduled)
    return Verdict.FAIL if failed else Verdict.PASS


def schedules_fail(scheduled: Sequence[ScheduledCell]) -> bool:
    """A scheduled cell fails the run when it failed, raised or did not happen as planned; one
    the engine cannot run (not applicable) is said with its reason and fails nothing."""
    return any(c.verdict not in (Verdict.PASS, Verdict.NOT_APPLICABLE) for c in scheduled)


@dataclass(frozen=True)
class Boundary:
    """Per beam width, the batch size from which cells fail: the largest passing size below
    the first failing one (None: none passed below it) and the first failing size (None:
    every size tested passes), over the sizes that ran (``tested``)."""

    beam_width: int
    tested: tuple[int, ...]
    last_passing: int | None
    first_failing: int | None
    message: str


@dataclass(frozen=True)
class Signoff:
    """Who ran the run, when, on which engine, and its verdict."""

    by: str | None
    at: str
    engine: str
    identity: str
    verdict: Verdict


@dataclass(frozen=True)
class GoldenFile:
    """A goldens file a beam width was compared with, by content."""

    path: str
    sha256: str | None


@dataclass(frozen=True)
class Method:
    """How the run decided: the options the analysis reads, and what each question was."""

    tolerance: float
    alpha: float
    seed: int
    sequences: int
    test: str = ""
    plan: str = ""
    rotation: Rotation = Rotation.FULL
    deterministic: bool = False
    # per question: "gate", "reported" or "not answered: <why>; <what the gate uses>"
    questions: dict[Question, str] = field(default_factory=dict)
    # why the batch-size quality question can hardly see damage in this run (None: it can)
    blind: str | None = None
    # tests in the Holm family: every test the run's grid makes (None: a report from before
    # it was recorded, whose family is the tests it records)
    family: int | None = None
    # the share of alpha the engine-wide test holds in the family (None: the design makes none)
    engine_share: float | None = None
    # the share of alpha the scheduled cells' tests hold in the family (None: the run makes none)
    schedule_share: float | None = None
    # what the sparse screen's follow-up spent (None: the design has none); ``sequences``
    # counts the screen's and the follow-up's
    follow_up: FollowUp | None = None
    # what the sequential design spent and where it stopped (None: the fixed design)
    sequential: Looks | None = None


@dataclass(frozen=True)
class ShardInfo:
    """A --shard run's own cells and the whole grid; a merged report's sources."""

    count: int
    index: int | None = None
    cells: tuple[str, ...] | None = None
    grid: tuple[str, ...] | None = None
    merged_from: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ShardScores:
    """What ``merge`` needs to analyse the union of the shards as one run: per-prompt scores
    (unrounded) by cell id, batch size 1's levels by beam width, examples of every degraded
    position by cell id, and the prompt order and lengths the fault signatures use."""

    levels: dict[int, Levels]
    cells: dict[str, CellScores]
    examples: dict[str, dict[int, tuple[Example, ...]]] = field(default_factory=dict)
    order: tuple[int, ...] = ()
    prompt_lengths: tuple[int, ...] = ()


@dataclass(frozen=True)
class Integrity:
    """The sha256 that seals report.json and, when the run had HARNESS_SIGNING_KEY, the HMAC
    that signs it (harness.report.serialize). The sha256 is unkeyed: anyone can recompute it
    after an edit, so it shows accidental change, not authorship; the HMAC shows that someone
    holding the key wrote this content."""

    sha256: str
    method: str = HASH_METHOD
    hmac: str | None = None  # HMAC_METHOD, hex


@dataclass(frozen=True)
class Report:
    """Everything report.json holds, in its order."""

    schema_version: int
    verdict: Verdict
    started: str
    finished: str
    seconds: float
    harness_version: str
    signoff: Signoff
    engine: EngineInfo
    limits: EngineLimits | None
    memory: tuple[MemoryBudget, ...]
    cache: CacheStats
    dataset: DatasetInfo
    ranks: Ranks
    baseline: dict[int, str]
    goldens: dict[int, GoldenFile]
    goldens_written: tuple[str, ...]
    method: Method
    options: JsonObject  # every run option as given (recorded; the analysis reads ``method``)
    environment: JsonObject
    timing: Timing
    cells: tuple[CellResult, ...]
    boundaries: tuple[Boundary, ...] = ()  # per beam width: where batch sizes start failing
    engine_wide: EngineWide | None = None  # question 2 pooled over every batched cell
    schedules: tuple[ScheduledCell, ...] = ()  # the in-flight schedules' cells (--schedules)
    shard: ShardInfo | None = None
    scores: ShardScores | None = None
    integrity: Integrity | None = None
