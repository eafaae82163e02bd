"""What one run carries from stage to stage: the orchestrator's working objects.

prepare -> ``Prepared``; generate -> ``Generated`` (``CellOutputs`` plus each failed cell's
error); score -> ``Baseline`` per beam width and ``Scored``; analyse -> one ``CellResult``
per cell (harness.model); the orchestrator (harness.pipeline) gathers them in a
``RunResult`` that the report stage and the plugin read. What a run measures and decides is
the measurement model (harness.model); these are how the run gets there (an engine, a
cache, the goldens store, outputs in generations.jsonl).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from harness.bounds import ScoringCap
from harness.config import RunConfig
from harness.engines.base import Engine
from harness.model.cell import Cell
from harness.model.dataset import Dataset
from harness.model.engine import EngineInfo
from harness.model.limits import EngineLimits, LimitCheck, MemoryBudget, failing
from harness.model.ranks import Ranks
from harness.model.report import Timing
from harness.model.scores import CellScores, Levels
from harness.plan import Plan
from harness.storage.cache import GenerationCache
from harness.storage.generations import CellTexts, Row
from harness.storage.goldens import GoldenSet, GoldensStore


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
        return [c for checks in self.checks.values() for c in failing(checks)]

    def lengths(self) -> tuple[int, ...]:
        """Prompt lengths for the padding signature: tokens, else words."""
        return self.prompt_lengths or tuple(len(p.split()) for p in self.prompts)

    @property
    def cap(self) -> ScoringCap:
        """How much of each output is scored."""
        return ScoringCap.for_tokens(self.config.max_new_tokens)


@dataclass(frozen=True)
class CellOutputs:
    """One cell's outputs: ``texts`` as generated (kept whole in generations.jsonl and the
    generation cache), ``scored`` cut to the ScoringCap (a multiple of --max-new-tokens), so
    that no output makes ROUGE-L, which is quadratic in length, take unbounded time."""

    cell: Cell
    texts: CellTexts
    cap: ScoringCap
    notice: str | None = None  # the engine did not run the cell as asked (e.g. never batched)

    def scored(self, position: int) -> Row:
        """The texts at one position as they are scored."""
        return self.cap.cut_row(self.texts.row(position))

    def scored_rows(self) -> tuple[Row, ...]:
        return tuple(self.scored(p) for p in range(len(self.texts)))


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
class Scored:
    """What the score stage produced: every scorable cell's scores, batch size 1's levels per
    beam width, and the cells that could not be scored."""

    cells: dict[Cell, CellScores]
    levels: dict[int, Levels]
    unscored: dict[Cell, str]


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
        return (
            f"{self.ranks.label}: drove the engine through {self.batches} batches "
            f"({self.sequences} sequences) in step with rank 0{failed}; rank 0 scores, "
            "asserts and writes the report"
        )
