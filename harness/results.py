"""The data that crosses stage boundaries, in one module that no stage owns.

prepare -> ``Prepared``; generate -> ``Generated`` (``CellOutputs`` plus each failed cell's
error); score -> ``Baseline`` and ``CellScores`` per cell (and batch size 1's ``levels``);
analyse -> ``CellAnalysis`` and ``Finding`` -> ``CellResult``; the orchestrator gathers them in
a ``RunResult`` that the report stage and the plugin read. Stages import this module; it
imports no stage, only the leaf libraries whose types it holds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.engines.base import Engine, EngineInfo
from harness.engines.ranks import Ranks
from harness.inputs.data import Dataset
from harness.limits.engine_config import EngineLimits
from harness.limits.preflight import LimitCheck, MemoryBudget
from harness.plan import Cell, Plan
from harness.storage.cache import CacheStats, GenerationCache
from harness.storage.goldens import GoldenSet, GoldensStore


class Verdict(str, Enum):
    """The outcome of a cell or a run."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # a cell the engine could not run (its message says why)
    UNTESTED = "untested"  # generated and scored, but not as the cell asked (its notice says how)

    def __str__(self) -> str:
        return self.value


def run_verdict(cells: Sequence[CellResult]) -> Verdict:
    """A run passes when every cell passes and no build limit is exceeded."""
    bad = any(c.verdict != Verdict.PASS or c.limit_failures for c in cells)
    return Verdict.FAIL if bad else Verdict.PASS


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
    merged_shards: int | None = None  # a merged report: how many shard timings were summed


@dataclass(frozen=True)
class Prepared:
    """Everything known before the engine generates anything (the prepare stage)."""

    config: RunConfig
    dataset: Dataset
    engine: Engine
    limits: EngineLimits | None
    plan: Plan
    prompts: tuple[str, ...]
    checks: dict[Cell, tuple[LimitCheck, ...]]
    memory: tuple[MemoryBudget, ...]
    goldens: dict[int, GoldenSet]
    store: GoldensStore
    started: dt.datetime
    t0: float
    golden_engine: Engine | None = None
    cache: GenerationCache | None = None
    prompt_lengths: tuple[int, ...] | None = None  # tokens, from the engine's tokenizer
    ranks: Ranks = field(default_factory=Ranks)
    timing: Timing = field(default_factory=Timing)
    grid: tuple[Cell, ...] = ()  # every cell of the unsharded grid

    def limit_failures(self) -> list[LimitCheck]:
        return [c for checks in self.checks.values() for c in checks if c.status == "fail"]

    def lengths(self) -> tuple[int, ...]:
        """Prompt lengths for the padding signature: tokens, else words."""
        return self.prompt_lengths or tuple(len(p.split()) for p in self.prompts)


Texts = Sequence[Sequence[str | None]]  # [position][document]; None: never sat there (sparse)
Beams = tuple[tuple[tuple[str, ...] | None, ...], ...]  # [position][document] -> every beam


@dataclass(frozen=True)
class CellOutputs:
    """Texts generated for one cell, indexed [position][document index]; once the cell is
    complete they live in generations.jsonl (``harness.storage.generations.SpilledTexts``)."""

    cell: Cell
    texts: Texts
    # every beam of every output, beam search only; () once the cell is in generations.jsonl,
    # which keeps them
    beams: Beams = ()
    notice: str | None = None  # the engine did not run the cell as asked (e.g. never batched)


@dataclass(frozen=True)
class Generated:
    """What the generate stage produced: outputs of the cells that ran, errors of the rest."""

    outputs: dict[Cell, CellOutputs]
    errors: dict[Cell, str]
    capped: dict[Cell, int] = field(default_factory=dict)  # outputs cut to the scoring cap


@dataclass(frozen=True)
class Baseline:
    """What one beam width's outputs are compared with: goldens, else batch size 1 of the run."""

    beam_width: int
    source: str  # said in the report: "goldens PATH" or "batch size 1 of this run"
    texts: tuple[str, ...]  # one per document, in dataset order
    goldens_path: str | None = None


@dataclass(frozen=True)
class CellScores:
    """Scores of one cell, indexed [position][prompt] (prompts in dataset order); NaN where
    the prompt never sat at that position (``--rotation sparse``) or, for ``reference``, where
    the dataset has no reference summary."""

    cell: Cell
    baseline: tuple[tuple[float, ...], ...]  # agreement: ROUGE-L against the baseline
    reference: tuple[tuple[float, ...], ...]  # quality: ROUGE-L against the reference summary
    differs: tuple[tuple[float, ...], ...] = ()  # 1.0 where the text is not batch size 1's


@dataclass(frozen=True)
class Levels:
    """Batch size 1 of one beam width, per prompt: what every other cell is compared with."""

    agreement: tuple[float, ...]  # ROUGE-L of batch size 1 against the baseline (1.0 unless goldens)
    quality: tuple[float, ...]  # ROUGE-L of batch size 1 against the reference (NaN: none)


@dataclass(frozen=True)
class Scored:
    """What the score stage produced: every scorable cell's scores, batch size 1's levels per
    beam width, and the cells that could not be scored."""

    cells: dict[Cell, CellScores]
    levels: dict[int, Levels]
    unscored: dict[Cell, str]


@dataclass(frozen=True)
class DropTest:
    """One one-sided test: is the mean drop larger than the tolerance?"""

    drop: float  # mean paired drop (positive: worse)
    p_value: float
    n: int
    p_adjusted: float | None = None  # Holm over every test of the run
    flagged: bool = False  # drop > tolerance and p_adjusted < alpha


@dataclass(frozen=True)
class PositionStats:
    """One batch position of one cell: the three questions' figures.

    - position dependence: agreement with the baseline here against the other positions of
      the same cell, same prompts (``position_test``);
    - batch-size quality: ROUGE-L against the references here against batch size 1, same
      prompts (``quality_test``; None without reference summaries);
    - determinism: the share of outputs that differ from batch size 1's (``differing``) and
      the agreement with the baseline (``agreement``), a gate only with --deterministic.
    """

    position: int
    n: int
    agreement: float  # mean ROUGE-L against the baseline
    agreement_drop: float  # mean paired drop of agreement below batch size 1's
    differing: float  # share of outputs that differ from batch size 1's
    quality: float | None  # mean ROUGE-L against the references (None: no references)
    quality_bs1: float | None  # the same prompts at batch size 1
    position_test: DropTest | None = None  # batch size > 1
    quality_test: DropTest | None = None  # batch size > 1, with references
    nondeterministic: bool = False  # --deterministic and an output differs
    ci_low: float | None = None  # 95% t-interval of the mean agreement
    ci_high: float | None = None

    @property
    def degraded(self) -> bool:
        return any(t is not None and t.flagged for t in (self.position_test, self.quality_test))


@dataclass(frozen=True)
class CellAnalysis:
    """Verdict of one cell's positions."""

    cell: Cell
    level: float  # mean agreement of batch size 1 with the baseline, same beam width
    positions: tuple[PositionStats, ...]
    degraded_positions: tuple[int, ...]
    verdict: Verdict  # pass | fail
    message: str
    quality: float | None = None  # mean ROUGE-L against the references over the positions
    quality_bs1: float | None = None
    differing: float = 0.0  # share of the cell's outputs that differ from batch size 1's
    omnibus: DropTest | None = None  # quality drop over all positions (damage spread thinly)
    spread: bool = False  # the omnibus test failed the cell, no single position did
    nondeterministic_positions: tuple[int, ...] = ()  # --deterministic only
    drift: str | None = None  # outputs differ from batch size 1 without losing quality


@dataclass(frozen=True)
class Finding:
    """A named fault signature and the sentence that goes into the failure and the report."""

    kind: str
    text: str
    evidence: str = ""  # what the named cause rests on


@dataclass(frozen=True)
class CellResult:
    """Everything known about one cell under test."""

    cell: Cell
    checks: tuple[LimitCheck, ...]
    analysis: CellAnalysis | None
    error: str | None = None
    finding: Finding | None = None  # the known fault signature the damage matches, if any
    # the engine did not run the cell as asked (a server that answered its batches one request
    # at a time): the positions were not exercised, so the cell cannot pass
    notice: str | None = None

    @property
    def verdict(self) -> Verdict:
        if self.error or self.analysis is None:
            return Verdict.ERROR
        if self.notice and self.analysis.verdict == Verdict.PASS:
            return Verdict.UNTESTED
        return self.analysis.verdict

    @property
    def limit_failures(self) -> tuple[LimitCheck, ...]:
        return tuple(c for c in self.checks if c.status == "fail")


@dataclass(frozen=True)
class RunResult:
    """What a run produced; the report stage and the plugin read only this."""

    config: RunConfig
    engine: EngineInfo
    limits: EngineLimits | None
    dataset: Dataset
    plan: Plan
    baselines: dict[int, Baseline]
    cells: tuple[CellResult, ...]
    outputs: tuple[CellOutputs, ...]
    started: str
    seconds: float
    memory: tuple[MemoryBudget, ...] = ()
    cache: CacheStats | None = None
    finished: str = ""
    goldens_written: tuple[str, ...] = ()
    report_dir: Path | None = None
    prompts: tuple[str, ...] = ()  # as sent to the engine, in dataset order
    ranks: Ranks = field(default_factory=Ranks)
    timing: Timing = field(default_factory=Timing)
    scores: tuple[CellScores, ...] = ()  # per-prompt scores, for shard reports and merge
    levels: dict[int, Levels] = field(default_factory=dict)  # batch size 1's, per beam width
    grid: tuple[Cell, ...] = ()  # every cell of the unsharded grid (= plan.cells unless --shard)
    prompt_lengths: tuple[int, ...] = ()  # what the fault signatures measured padding in
    report: Report | None = None  # the report written for it (set once it is written)

    @property
    def verdict(self) -> Verdict:
        return run_verdict(self.cells)


@dataclass(frozen=True)
class FollowerRun:
    """What a rank other than 0 did under MPI: it drove the engine through every batch rank 0
    ran, in the same order; it scores, asserts and writes nothing."""

    ranks: Ranks
    engine: EngineInfo
    batches: int
    sequences: int
    seconds: float
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        failed = f"; {len(self.errors)} cell(s) raised here too" if self.errors else ""
        return (f"{self.ranks.label}: drove the engine through {self.batches} batches "
                f"({self.sequences} sequences) in step with rank 0{failed}; rank 0 scores, "
                "asserts and writes the report")


# The report: what the report stage builds from a RunResult; writers, compare and merge read it.

SCHEMA_VERSION = 2  # 2: the three questions (position dependence, batch-size quality, determinism)
HASH_METHOD = "sha256 of this JSON without 'integrity', keys sorted, separators (',', ':'), UTF-8"


@dataclass(frozen=True)
class Signoff:
    by: str | None
    at: str
    engine: str
    identity: str
    verdict: Verdict


@dataclass(frozen=True)
class EngineFile:
    name: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class EngineSection:
    path: str
    backend: str
    identity: str
    details: dict[str, Any] = field(default_factory=dict)
    files: tuple[EngineFile, ...] = ()


@dataclass(frozen=True)
class SubsetInfo:
    num_prompts: int
    seed: int
    of: int
    source_hash: str
    ids: tuple[str, ...]
    hash: str
    method: str = ""


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    path: str
    count: int
    hash: str
    source: str = "file"
    config: str | None = None
    split: str | None = None
    revision: str | None = None
    text_field: str = "text"
    summary_field: str = "summary"
    subset: SubsetInfo | None = None


@dataclass(frozen=True)
class RanksInfo:
    world_size: int
    source: str


@dataclass(frozen=True)
class GoldenFile:
    path: str
    sha256: str | None


@dataclass(frozen=True)
class Method:
    tolerance: float
    alpha: float
    seed: int
    sequences: int
    test: str = ""
    plan: str = ""
    rotation: str = "full"
    deterministic: bool = False
    # per question: "gate", "reported" or "not answered: <why>; <what the gate uses>"
    questions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PositionEntry:
    position: int
    n: int
    agreement: float  # mean ROUGE-L against the baseline
    ci_low: float | None
    ci_high: float | None
    agreement_drop: float  # below batch size 1's agreement
    differing: float  # share of outputs that differ from batch size 1's
    quality: float | None  # mean ROUGE-L against the references (None: no references)
    quality_bs1: float | None
    position_test: DropTest | None
    quality_test: DropTest | None
    degraded: bool
    nondeterministic: bool = False


@dataclass(frozen=True)
class Example:
    position: int
    id: str
    prompt: str
    baseline: str
    output: str


@dataclass(frozen=True)
class CellEntry:
    id: str
    batch_size: int
    beam_width: int
    verdict: Verdict
    limits_verdict: Verdict
    error: str | None
    message: str
    cause: str | None
    pattern: str | None
    evidence: str | None  # what the named cause rests on
    baseline_level: float | None
    quality: float | None
    quality_bs1: float | None
    differing: float | None
    drift: str | None  # outputs that differ without losing quality: a finding, not a failure
    degraded_positions: tuple[int, ...]
    nondeterministic_positions: tuple[int, ...]
    omnibus: DropTest | None
    positions: tuple[PositionEntry, ...]
    limit_checks: tuple[LimitCheck, ...]
    examples: tuple[Example, ...]
    notice: str | None = None  # why the cell is untested (CellResult.notice)


@dataclass(frozen=True)
class ShardInfo:
    """A --shard run's own cells and the whole grid; a merged report's sources."""

    count: int
    index: int | None = None
    cells: tuple[str, ...] | None = None
    grid: tuple[str, ...] | None = None
    merged_from: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ShardCellScores:
    """Per-prompt scores of one cell (None: the prompt never sat there, or has no reference)
    and the examples of every degraded position, for ``merge``."""

    baseline: tuple[tuple[float | None, ...], ...]
    reference: tuple[tuple[float | None, ...], ...]
    differs: tuple[tuple[float | None, ...], ...]
    examples: dict[str, tuple[Example, ...]]


@dataclass(frozen=True)
class ShardLevels:
    """Batch size 1's per-prompt levels of one beam width (None: no reference)."""

    agreement: tuple[float | None, ...]
    quality: tuple[float | None, ...]


@dataclass(frozen=True)
class ShardScores:
    levels: dict[int, ShardLevels]
    cells: dict[str, ShardCellScores]
    order: tuple[int, ...] = ()
    prompt_lengths: tuple[int, ...] = ()


@dataclass(frozen=True)
class Integrity:
    sha256: str
    method: str = HASH_METHOD


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
    engine: EngineSection
    limits: EngineLimits | None
    memory: tuple[MemoryBudget, ...]
    cache: CacheStats
    dataset: DatasetInfo
    ranks: RanksInfo
    baseline: dict[int, str]
    goldens: dict[int, GoldenFile]
    goldens_written: tuple[str, ...]
    method: Method
    options: dict[str, Any]
    environment: dict[str, Any]
    timing: Timing
    cells: tuple[CellEntry, ...]
    shard: ShardInfo | None = None
    scores: ShardScores | None = None
    integrity: Integrity | None = None
