"""An engine's build limits, and the checks of a cell against them (``harness.limits`` reads
config.json into these and runs the checks)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harness.model.vocab import CheckStatus, Layout

BYTES_PER_ELEMENT = {
    "float64": 8.0,
    "float32": 4.0,
    "float16": 2.0,
    "bfloat16": 2.0,
    "int8": 1.0,
    "fp8": 1.0,
    "fp4": 0.5,
}


@dataclass(frozen=True)
class EngineLimits:
    """What an engine was built to accept, and the shape its KV cache has."""

    layout: Layout
    version: str | None = None  # TensorRT-LLM version that wrote the config
    max_batch_size: int | None = None
    max_beam_width: int | None = None
    max_input_len: int | None = None
    max_seq_len: int | None = None
    max_output_len: int | None = None
    max_num_tokens: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    quant_algo: str | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_size: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    tp_size: int | None = None
    pp_size: int | None = None
    paged_kv_cache: bool | None = None
    tokens_per_block: int | None = None
    emulator: bool = False

    @property
    def beam_slots(self) -> int | None:
        """KV-cache beam slots the engine allocated: max_batch_size x max_beam_width."""
        if self.max_batch_size is None or self.max_beam_width is None:
            return None
        return self.max_batch_size * self.max_beam_width

    @property
    def sequence_limit(self) -> int | None:
        """Prompt + output tokens an engine holds: max_seq_len, else input + output."""
        if self.max_seq_len is not None:
            return self.max_seq_len
        if self.max_input_len is not None and self.max_output_len is not None:
            return self.max_input_len + self.max_output_len
        return None

    @property
    def kv_bytes_per_element(self) -> float | None:
        return BYTES_PER_ELEMENT.get(self.kv_cache_dtype or "")


def overflow_positions(batch_size: int, beam_width: int, slots: int | None) -> tuple[int, ...]:
    """Batch positions whose beam slots (``position * beam_width + beam``) lie beyond ``slots``:
    the ones a KV cache of that many beam slots cannot hold (None: unknown, none)."""
    if slots is None:
        return ()
    return tuple(p for p in range(batch_size) if (p + 1) * beam_width > slots)


@dataclass(frozen=True)
class LimitCheck:
    """One check of one cell against one build limit."""

    cell: str
    name: str
    status: CheckStatus
    message: str


@dataclass(frozen=True)
class MemoryBudget:
    """KV cache plus weights on one GPU, against the GPU's memory."""

    label: str
    batch_size: int | None
    beam_width: int | None
    kv_cache_bytes: int | None
    weights_bytes: int | None
    gpu_bytes: int | None
    gpu_source: str
    status: CheckStatus
    message: str


def failing(checks: Iterable[LimitCheck]) -> tuple[LimitCheck, ...]:
    """The checks that failed: the build limits a cell exceeds."""
    return tuple(c for c in checks if c.status == CheckStatus.FAIL)
