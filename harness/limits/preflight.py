"""Build limits and KV-cache memory checked against the cells a run asks for.

Every check reads config.json only (plus the tokenizer for prompt lengths): milliseconds,
before any GPU time is spent. A limit the config does not record makes its check
``unknown``, never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.config import parse_size
from harness.limits.engine_config import weights_bytes
from harness.limits.ranks import engine_ranks, world_size
from harness.model.cell import Cell
from harness.model.limits import EngineLimits, LimitCheck, MemoryBudget
from harness.model.vocab import CheckStatus


def gib(n: int | float | None) -> str:
    return "unknown" if n is None else f"{n / 2**30:.2f} GiB"


DEFAULT_GPU_MEMORY = "80GiB"  # an H100 80GB, the usual target, when no GPU can be read


def gpu_memory(option: str | None) -> tuple[int | None, str]:
    """The GPU's memory: --gpu-memory when given, else CUDA device 0's, else 80GiB."""
    if option:
        return parse_size(option), f"--gpu-memory {option}"
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return int(props.total_memory), f"cuda:0 {props.name}"
    except Exception:  # no torch or no driver: the budget is still shown, unchecked
        pass
    return (
        parse_size(DEFAULT_GPU_MEMORY),
        f"no GPU here: assumed {DEFAULT_GPU_MEMORY}, set --gpu-memory for your GPU",
    )


def kv_cache_bytes(limits: EngineLimits, batch_size: int, beam_width: int) -> int | None:
    """2 x layers x KV heads x head size x max_seq_len x batch x beams x bytes, per GPU."""
    seq = limits.sequence_limit
    layers, kv_heads, head, per = (
        limits.num_layers,
        limits.num_kv_heads,
        limits.head_size,
        limits.kv_bytes_per_element,
    )
    if layers is None or kv_heads is None or head is None or seq is None or per is None:
        return None
    seq_len = seq
    ranks = (limits.tp_size or 1) * (limits.pp_size or 1)
    return int(2 * layers * kv_heads * head * seq_len * batch_size * beam_width * per / ranks)


def memory_budget(
    limits: EngineLimits,
    batch_size: int,
    beam_width: int,
    *,
    label: str,
    weights: int | None,
    gpu: tuple[int | None, str],
    over: CheckStatus,
) -> MemoryBudget:
    """KV cache for batch x beams at max_seq_len plus weights; ``over`` is the status when it
    does not fit (fail for a requested cell, warn for the engine's maxima)."""
    kv = kv_cache_bytes(limits, batch_size, beam_width)
    gpu_bytes, source = gpu
    what = f"KV cache {gib(kv)} + weights {gib(weights)}"
    if kv is None:
        status: CheckStatus = CheckStatus.UNKNOWN
        message = (
            f"{label}: KV cache size unknown (config.json lacks layers, KV heads, head "
            "size, sequence length or dtype)"
        )
    elif limits.emulator:
        status, message = CheckStatus.PASS, f"{label}: {what} (emulator: runs on the CPU, no GPU budget)"
    elif gpu_bytes is None:
        status, message = CheckStatus.UNKNOWN, f"{label}: {what}; {source}"
    else:
        total = kv + (weights or 0)
        fits = total <= gpu_bytes
        status = CheckStatus.PASS if fits else over
        message = (
            f"{label}: {what} = {gib(total)} {'fits in' if fits else 'exceeds'} {gib(gpu_bytes)} ({source})"
        )
        if not fits and limits.paged_kv_cache and over == CheckStatus.WARN:
            message += "; with paged KV cache the runtime allocates a fraction of free memory instead"
    return MemoryBudget(
        label=label,
        batch_size=batch_size,
        beam_width=beam_width,
        kv_cache_bytes=kv,
        weights_bytes=weights,
        gpu_bytes=gpu_bytes,
        gpu_source=source,
        status=status,
        message=message,
    )


def engine_maxima_budget(
    limits: EngineLimits, *, weights: int | None, gpu: tuple[int | None, str]
) -> MemoryBudget | None:
    """The budget at max_batch_size x max_beam_width (a warning when it does not fit)."""
    if limits.max_batch_size is None or limits.max_beam_width is None:
        return None
    return memory_budget(
        limits,
        limits.max_batch_size,
        limits.max_beam_width,
        label=f"engine maxima {limits.max_batch_size} x {limits.max_beam_width}",
        weights=weights,
        gpu=gpu,
        over=CheckStatus.WARN,
    )


def _rebuild(limits: EngineLimits, **changes: int) -> str:
    """The trtllm-build flags that fix a limit, with the other limits kept as they were."""
    flags: dict[str, int | None] = {
        "max_batch_size": limits.max_batch_size,
        "max_beam_width": limits.max_beam_width,
        "max_input_len": limits.max_input_len,
    }
    if limits.max_seq_len is not None or limits.max_output_len is None:
        flags["max_seq_len"] = limits.max_seq_len
    else:
        flags["max_output_len"] = limits.max_output_len
    flags.update(changes)
    changed = " ".join(f"--{k} {v}" for k, v in changes.items())
    kept = " ".join(f"--{k} {v}" for k, v in flags.items() if k not in changes and v is not None)
    text = f"rebuild with trtllm-build {changed}" + (f" (keeping {kept})" if kept else "")
    if limits.emulator:
        cli = " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in flags.items()
            if v is not None and k != "max_output_len"
        )
        text += f"; for this emulator engine: python -m harness build-engine --output DIR {cli}"
    return text


def check_cell(
    cell: Cell,
    limits: EngineLimits | None,
    *,
    longest_prompt: int | None,
    prompts_over_input: int,
    max_new_tokens: int,
    memory: MemoryBudget | None = None,
    processes: int | None = 1,
) -> list[LimitCheck]:
    """Batch size, beam width, input and sequence length, memory and ranks of one cell."""
    cid = cell.id
    names = ("max_batch_size", "max_beam_width", "max_input_len", "max_seq_len")
    if limits is None:
        return [
            LimitCheck(cid, name, CheckStatus.UNKNOWN, f"{name}: the engine records no build limits")
            for name in names
        ]
    checks: list[LimitCheck] = []

    def add(name: str, status: CheckStatus, message: str) -> None:
        checks.append(LimitCheck(cid, name, status, message))

    def unknown(name: str, why: str = "") -> None:
        add(
            name,
            CheckStatus.UNKNOWN,
            f"{name}: {why or f'not recorded in this {limits.layout} config.json'}; cannot check",
        )

    if limits.max_batch_size is None:
        unknown("max_batch_size")
    elif cell.batch_size > limits.max_batch_size:
        add(
            "max_batch_size",
            CheckStatus.FAIL,
            f"batch size {cell.batch_size} exceeds the engine's "
            f"max_batch_size {limits.max_batch_size}; " + _rebuild(limits, max_batch_size=cell.batch_size),
        )
    else:
        add(
            "max_batch_size",
            CheckStatus.PASS,
            f"batch size {cell.batch_size} <= max_batch_size {limits.max_batch_size}",
        )

    if limits.max_beam_width is None:
        unknown(
            "max_beam_width",
            "not recorded in this config.json (TensorRT-LLM 0.5 engines "
            "do not record it; it is not assumed to be 1)",
        )
    elif cell.beam_width > limits.max_beam_width:
        slots = (limits.max_batch_size or 0) * limits.max_beam_width
        add(
            "max_beam_width",
            CheckStatus.FAIL,
            f"num_beams {cell.beam_width} exceeds the engine's "
            f"max_beam_width {limits.max_beam_width} (KV cache holds {slots} beam slots, the cell "
            f"needs {cell.batch_size * cell.beam_width}); "
            + _rebuild(limits, max_beam_width=cell.beam_width),
        )
    else:
        add(
            "max_beam_width",
            CheckStatus.PASS,
            f"num_beams {cell.beam_width} <= max_beam_width {limits.max_beam_width}",
        )

    if longest_prompt is None:
        unknown("max_input_len", "no tokenizer to count prompt tokens (pass --tokenizer DIR)")
    elif limits.max_input_len is None:
        unknown("max_input_len")
    elif longest_prompt > limits.max_input_len:
        add(
            "max_input_len",
            CheckStatus.FAIL,
            f"the longest prompt has {longest_prompt} tokens, over the "
            f"engine's max_input_len {limits.max_input_len} ({prompts_over_input} prompts would be "
            "truncated); " + _rebuild(limits, max_input_len=longest_prompt),
        )
    else:
        add(
            "max_input_len",
            CheckStatus.PASS,
            f"longest prompt {longest_prompt} <= max_input_len {limits.max_input_len}",
        )

    limit = limits.sequence_limit
    if longest_prompt is None or limit is None:
        unknown("max_seq_len", "" if limit is None else "no tokenizer to count prompt tokens")
    elif longest_prompt + max_new_tokens > limit:
        need = longest_prompt + max_new_tokens
        if limits.max_seq_len is not None or limits.max_output_len is None:
            fix = _rebuild(limits, max_seq_len=need)
        else:
            fix = _rebuild(limits, max_output_len=need - (limits.max_input_len or 0))
        add(
            "max_seq_len",
            CheckStatus.FAIL,
            f"longest prompt {longest_prompt} + max_new_tokens "
            f"{max_new_tokens} = {need} exceeds the engine's sequence limit {limit}; {fix}",
        )
    else:
        add(
            "max_seq_len",
            CheckStatus.PASS,
            f"longest prompt {longest_prompt} + max_new_tokens {max_new_tokens} <= {limit}",
        )

    if processes is not None and (limits.tp_size is not None or limits.pp_size is not None):
        ranks = engine_ranks(limits.tp_size, limits.pp_size)
        if ranks != processes:
            add(
                "ranks",
                CheckStatus.FAIL,
                f"the engine is mapped to tp {limits.tp_size or 1} x pp "
                f"{limits.pp_size or 1} = {ranks} ranks but this run has {processes} process(es); "
                f"run under `mpirun -n {ranks}`",
            )
        else:
            add("ranks", CheckStatus.PASS, f"tp x pp = {ranks} = processes {processes}")

    if memory is not None:
        add("kv_cache_memory", memory.status, memory.message)
    return checks


@dataclass(frozen=True)
class Preflight:
    """Every check of every cell, and the memory budgets (per cell, then the maxima)."""

    checks: dict[Cell, tuple[LimitCheck, ...]]
    memory: tuple[MemoryBudget, ...]


def preflight(
    cells: Sequence[Cell],
    limits: EngineLimits | None,
    *,
    engine_dir: str | Path,
    prompt_lengths: Sequence[int] | None,
    max_new_tokens: int,
    gpu_option: str | None,
    check_ranks: bool = True,
) -> Preflight:
    """The checks the suites, the report and ``lint`` share (``lint`` runs outside mpirun, so
    it leaves the rank check to the run)."""
    longest = max(prompt_lengths) if prompt_lengths else None
    cap = limits.max_input_len if limits else None
    over = sum(1 for n in prompt_lengths or () if cap and n > cap)
    memory: dict[Cell, MemoryBudget] = {}
    maxima: tuple[MemoryBudget, ...] = ()
    if limits is not None:
        weights, gpu = weights_bytes(engine_dir), gpu_memory(gpu_option)
        memory = {
            c: memory_budget(
                limits,
                c.batch_size,
                c.beam_width,
                label=c.id,
                weights=weights,
                gpu=gpu,
                over=CheckStatus.FAIL,
            )
            for c in cells
        }
        top = engine_maxima_budget(limits, weights=weights, gpu=gpu)
        maxima = (top,) if top else ()
    processes = world_size() if check_ranks else None
    checks = {
        c: tuple(
            check_cell(
                c,
                limits,
                longest_prompt=longest,
                prompts_over_input=over,
                max_new_tokens=max_new_tokens,
                memory=memory.get(c),
                processes=processes,
            )
        )
        for c in cells
    }
    return Preflight(checks=checks, memory=tuple(memory.values()) + maxima)
