"""``lint``: an engine's limits, every check of one cell, and the KV-cache budget, from
config.json alone (plus a tokenizer for prompt lengths) in well under a second."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.config import RunConfig
from harness.errors import EngineError, first_line
from harness.inputs.data import build_prompt
from harness.limits.engine_config import read_engine_config
from harness.limits.preflight import preflight
from harness.model.cell import Cell
from harness.model.json import JsonObject, as_json
from harness.model.limits import EngineLimits, LimitCheck, MemoryBudget, failing
from harness.model.vocab import Verdict
from harness.stages.prepare import load_run_dataset

LIMIT_FIELDS = (
    "max_batch_size",
    "max_beam_width",
    "max_input_len",
    "max_seq_len",
    "max_output_len",
    "max_num_tokens",
    "dtype",
    "kv_cache_dtype",
    "quant_algo",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_size",
    "vocab_size",
    "tp_size",
    "pp_size",
    "paged_kv_cache",
    "tokens_per_block",
    "version",
)


@dataclass(frozen=True)
class LintResult:
    """What ``lint`` found for one engine and one cell."""

    engine: str
    limits: EngineLimits
    cell: Cell
    checks: tuple[LimitCheck, ...]
    memory: tuple[MemoryBudget, ...]
    prompt_source: str

    @property
    def verdict(self) -> Verdict:
        return Verdict.FAIL if failing(self.checks) else Verdict.PASS

    def as_dict(self) -> JsonObject:
        return {
            "engine": self.engine,
            "layout": self.limits.layout.value,
            "limits": as_json(self.limits),
            "cell": {"batch_size": self.cell.batch_size, "beam_width": self.cell.beam_width},
            "checks": [{"name": c.name, "status": c.status.value, "message": c.message} for c in self.checks],
            "kv_cache_bytes": self.memory[0].kv_cache_bytes if self.memory else None,
            "memory": as_json(self.memory),
            "prompts": self.prompt_source,
            "verdict": self.verdict.value,
        }


def _prompt_lengths(
    engine_dir: Path, tokenizer: str | None, config: RunConfig
) -> tuple[list[int] | None, str]:
    tok_dir = Path(tokenizer) if tokenizer else engine_dir / "tokenizer"
    if not tok_dir.is_dir():
        return None, "no tokenizer (pass --tokenizer DIR to check prompt lengths)"
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(tok_dir), trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise EngineError(
            f"--tokenizer {tok_dir}: cannot load a tokenizer ({first_line(exc) or type(exc).__name__})"
        ) from None
    ds = load_run_dataset(config)
    prompts = [build_prompt(config.prompt_template, d) for d in ds.documents]
    return [len(x) for x in tok(prompts)["input_ids"]], f"{ds.info.name} ({len(ds)} prompts) via {tok_dir}"


def lint(
    engine_dir: str | Path,
    *,
    batch_size: int | None = None,
    num_beams: int = 1,
    tokenizer: str | None = None,
    config: RunConfig | None = None,
) -> LintResult:
    """Check one cell (default: the engine's max_batch_size, greedy) against an engine, with
    the run's options that decide it (the dataset and template for prompt lengths,
    --max-new-tokens, --gpu-memory)."""
    config = config or RunConfig()
    path = Path(engine_dir)
    _, limits = read_engine_config(path)
    cell = Cell(batch_size or limits.max_batch_size or 1, num_beams)
    lengths, source = _prompt_lengths(path, tokenizer, config)
    found = preflight(
        [cell],
        limits,
        engine_dir=path,
        prompt_lengths=lengths,
        max_new_tokens=config.max_new_tokens,
        gpu_option=config.gpu_memory,
        check_ranks=False,
    )
    return LintResult(
        engine=str(path),
        limits=limits,
        cell=cell,
        checks=found.checks[cell],
        memory=found.memory,
        prompt_source=source,
    )


def format_text(result: LintResult) -> str:
    """Human-readable lint output."""
    lim = result.limits
    lines = [
        f"engine {result.engine}: {lim.layout} layout, TensorRT-LLM {lim.version or 'version not recorded'}",
        "limits:",
    ]
    for name in LIMIT_FIELDS:
        value = getattr(lim, name)
        lines.append(f"  {name:<17} {'unknown' if value is None else value}")
    lines.append(
        f"checks for batch size {result.cell.batch_size}, num_beams "
        f"{result.cell.beam_width} (prompts: {result.prompt_source}):"
    )
    for c in result.checks:
        lines.append(f"  {c.status.upper():<7} {c.name:<16} {c.message}")
    lines.append("memory per GPU:")
    for m in result.memory:
        lines.append(f"  {m.status.upper():<7} {m.message}")
    lines.append(f"verdict: {result.verdict}")
    return "\n".join(lines)
