"""A run's plan and build-limit checks without loading the engine: from the options, the
engine's config.json, the dataset and the tokenizer files only (no weights, no TensorRT-LLM),
in seconds. ``python -m harness run --dry-run`` and ``pytest suites/ --collect-only`` print it
(with ``harness.report.estimate``'s time); ``pytest suites/test_preflight.py`` checks its
limits when nothing is to be generated. What a run will cost: its sequences, batches and the
tokens it may generate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.config import RunConfig
from harness.engines.registry import engine_folder
from harness.engines.tokenizer import has_tokenizer, open_tokenizer
from harness.errors import EngineError
from harness.inputs.prompts import chat_tokenizer, render_chat
from harness.limits.preflight import preflight
from harness.limits.ranks import current
from harness.model.cell import Cell
from harness.model.limits import EngineLimits, LimitCheck, MemoryBudget, failing
from harness.plan import Plan, make_plan
from harness.stages.prepare import load_run_dataset, peeked_limits, planned_batch_sizes
from harness.stages.schedules import schedules_line


@dataclass(frozen=True)
class PlanOnly:
    """What a run would do and check, known before its engine loads."""

    plan: Plan
    limits: EngineLimits | None
    checks: dict[Cell, tuple[LimitCheck, ...]]
    memory: tuple[MemoryBudget, ...]
    max_new_tokens: int
    lengths: str  # where the prompt lengths came from, or why they are unknown
    scheduled: str | None = None  # what the scheduled cells may send (harness.stages.schedules)

    @property
    def limit_failures(self) -> list[LimitCheck]:
        return [c for checks in self.checks.values() for c in failing(checks)]

    def cost_lines(self) -> list[str]:
        """The plan and what it may generate."""
        plan, tokens = self.plan, self.max_new_tokens
        cells = plan.all_cells
        batches = sum(len(plan.batches(c)) for c in cells)
        sequences = plan.sequences()
        beam_tokens = sum(len(plan.batches(c)) * c.batch_size * c.beam_width for c in cells) * tokens
        return [
            plan.describe(),
            *([self.scheduled] if self.scheduled else []),
            f"cells: {', '.join(c.id for c in plan.cells)}",
            f"tokens: at most {sequences * tokens:,} generated ({tokens} per sequence), "
            f"{beam_tokens:,} counting every beam; {batches * tokens:,} decode steps "
            f"({batches:,} batches x {tokens})",
        ]

    def limit_lines(self) -> list[str]:
        """The build limits against the cells (config.json), one line per exceeded limit."""
        if self.limits is None:
            return [
                "build limits: the engine records none (no TensorRT-LLM config.json), so none are checked"
            ]
        failed = self.limit_failures
        head = (
            f"build limits ({self.limits.layout} config.json"
            + (f", TensorRT-LLM {self.limits.version}" if self.limits.version else "")
            + f"; prompt lengths: {self.lengths}): "
        )
        if not failed:
            return [head + f"every cell within them ({len(self.checks)} checked)"]
        return [head + f"{len(failed)} exceeded", *(f"  {c.cell}: {c.message}" for c in failed)]


def _tokenizer_folder(config: RunConfig, engine_dir: Path) -> Path | None:
    """--tokenizer, else the engine folder or its tokenizer/ when they hold one."""
    if config.engine_options.tokenizer:
        return Path(config.engine_options.tokenizer).expanduser()
    for folder in (engine_dir, engine_dir / "tokenizer"):
        if folder.is_dir() and has_tokenizer(folder):
            return folder
    return None


def _prompt_lengths(
    config: RunConfig, engine_dir: Path | None, prompts: list[str]
) -> tuple[list[int] | None, str]:
    """Prompt lengths in tokens from the tokenizer files alone, and where they came from."""
    folder = _tokenizer_folder(config, engine_dir) if engine_dir is not None else None
    if folder is None:
        return None, "unknown (no tokenizer next to the engine: pass --tokenizer DIR)"
    try:
        tokenizer = open_tokenizer(folder, config.engine_options)
    except EngineError as exc:
        return None, f"unknown ({exc})"
    if config.chat:
        chat = chat_tokenizer(tokenizer, f"engine at {folder}")
        prompts = [render_chat(chat, p) for p in prompts]
    return [len(ids) for ids in tokenizer(prompts)["input_ids"]], f"tokenizer {folder}"


def plan_only(config: RunConfig) -> PlanOnly:
    """The plan and the limit checks of a run, without loading its engine."""
    from harness.inputs.data import build_prompt

    dataset = load_run_dataset(config)
    plan = make_plan(
        planned_batch_sizes(config), config.beam_widths, len(dataset), config.seed, config.rotation
    )
    limits = peeked_limits(config)
    engine_dir = engine_folder(config.engine, config.backend)
    prompts = [build_prompt(config.prompt_template, d) for d in dataset.documents]
    lengths, source = _prompt_lengths(config, engine_dir, prompts)
    # a dry run outside mpirun leaves the rank count to the run (as lint does)
    checked = preflight(
        plan.cells,
        limits,
        engine_dir=engine_dir or Path("."),
        prompt_lengths=lengths,
        max_new_tokens=config.max_new_tokens,
        gpu_option=config.gpu_memory,
        check_ranks=current().world_size > 1,
    )
    if config.shard:
        plan = plan.shard(*config.shard)
    return PlanOnly(
        scheduled=schedules_line(config, plan),
        plan=plan,
        limits=limits,
        checks=checked.checks,
        memory=checked.memory,
        max_new_tokens=config.max_new_tokens,
        lengths=source,
    )
