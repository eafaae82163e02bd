"""Engine build limits from config.json, checked against the cells a run asks for.

Reads TensorRT-LLM's unified layout (``version``/``pretrained_config``/``build_config``,
0.9 on, including the emulator's) and the legacy ``builder_config`` layout (0.5-0.8). A
limit a layout does not record is ``None`` (unknown), and checks that need it say so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from harness.plan import Cell

Status = Literal["pass", "fail", "unknown"]


@dataclass(frozen=True)
class EngineLimits:
    """What an engine was built to accept; None where the config does not say."""

    layout: str
    version: str | None = None
    max_batch_size: int | None = None
    max_beam_width: int | None = None
    max_input_len: int | None = None
    max_seq_len: int | None = None
    max_output_len: int | None = None
    dtype: str | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_size: int | None = None
    vocab_size: int | None = None
    tp_size: int | None = None
    pp_size: int | None = None
    emulator: bool = False

    @property
    def sequence_limit(self) -> int | None:
        """Prompt + output tokens an engine holds: max_seq_len, else input + output."""
        if self.max_seq_len is not None:
            return self.max_seq_len
        if self.max_input_len is not None and self.max_output_len is not None:
            return self.max_input_len + self.max_output_len
        return None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LimitCheck:
    """One check of one cell against one build limit."""

    cell: str
    name: str
    status: Status
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int_or_none(section: dict[str, Any], key: str) -> int | None:
    value = section.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_limits(config: dict[str, Any] | None) -> EngineLimits | None:
    """EngineLimits from a config.json object; None when there is no engine config."""
    if not config:
        return None
    if "build_config" in config and "pretrained_config" in config:
        build, pre = config["build_config"] or {}, config["pretrained_config"] or {}
        mapping = pre.get("mapping") or {}
        heads = _int_or_none(pre, "num_attention_heads")
        hidden = _int_or_none(pre, "hidden_size")
        head_size = _int_or_none(pre, "head_size") or (hidden // heads if hidden and heads else None)
        return EngineLimits(
            layout="emulator" if "emulator" in config else "unified",
            version=str(config.get("version")) if config.get("version") is not None else None,
            max_batch_size=_int_or_none(build, "max_batch_size"),
            max_beam_width=_int_or_none(build, "max_beam_width"),
            max_input_len=_int_or_none(build, "max_input_len"),
            max_seq_len=_int_or_none(build, "max_seq_len"),
            max_output_len=_int_or_none(build, "max_output_len"),
            dtype=pre.get("dtype"), num_layers=_int_or_none(pre, "num_hidden_layers"),
            num_heads=heads, num_kv_heads=_int_or_none(pre, "num_key_value_heads"),
            head_size=head_size, vocab_size=_int_or_none(pre, "vocab_size"),
            tp_size=_int_or_none(mapping, "tp_size"), pp_size=_int_or_none(mapping, "pp_size"),
            emulator="emulator" in config)
    if "builder_config" in config:
        b = config["builder_config"] or {}
        return EngineLimits(
            layout="legacy", version=b.get("tensorrt_llm_version"),
            max_batch_size=_int_or_none(b, "max_batch_size"),
            max_beam_width=_int_or_none(b, "max_beam_width"),  # absent in 0.5: unknown, not 1
            max_input_len=_int_or_none(b, "max_input_len"),
            max_output_len=_int_or_none(b, "max_output_len"),
            dtype=b.get("precision"), num_layers=_int_or_none(b, "num_layers"),
            num_heads=_int_or_none(b, "num_heads"), num_kv_heads=_int_or_none(b, "num_kv_heads"),
            head_size=_int_or_none(b, "head_size"), vocab_size=_int_or_none(b, "vocab_size"),
            tp_size=_int_or_none(b, "tensor_parallel"), pp_size=_int_or_none(b, "pipeline_parallel"))
    return None


def _rebuild(limits: EngineLimits, **changes: int) -> str:
    """The trtllm-build flags that fix a limit, with the other limits kept as they were."""
    flags = {"max_batch_size": limits.max_batch_size, "max_beam_width": limits.max_beam_width,
             "max_input_len": limits.max_input_len}
    if limits.max_seq_len is not None or limits.max_output_len is None:
        flags["max_seq_len"] = limits.max_seq_len
    else:
        flags["max_output_len"] = limits.max_output_len
    flags.update(changes)
    changed = " ".join(f"--{k} {v}" for k, v in changes.items())
    kept = " ".join(f"--{k} {v}" for k, v in flags.items() if k not in changes and v is not None)
    text = f"rebuild with trtllm-build {changed}" + (f" (keeping {kept})" if kept else "")
    if limits.emulator:
        cli = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in flags.items()
                       if v is not None and k != "max_output_len")
        text += f"; for this emulator engine: python -m harness build-engine --output DIR {cli}"
    return text


def check_cell(cell: Cell, limits: EngineLimits | None, *, longest_prompt: int | None,
               prompts_over_input: int, max_new_tokens: int) -> list[LimitCheck]:
    """Batch size, beam width, input length and sequence length of one cell."""
    cid = cell.id
    if limits is None:
        return [LimitCheck(cid, name, "unknown", f"{name}: the engine records no build limits")
                for name in ("max_batch_size", "max_beam_width", "max_input_len", "max_seq_len")]
    checks: list[LimitCheck] = []

    def unknown(name: str) -> None:
        checks.append(LimitCheck(cid, name, "unknown",
                                 f"{name}: not recorded in this {limits.layout} config.json; "
                                 "cannot check"))

    if limits.max_batch_size is None:
        unknown("max_batch_size")
    elif cell.batch_size > limits.max_batch_size:
        checks.append(LimitCheck(cid, "max_batch_size", "fail",
                                 f"batch size {cell.batch_size} exceeds the engine's max_batch_size "
                                 f"{limits.max_batch_size}; "
                                 + _rebuild(limits, max_batch_size=cell.batch_size)))
    else:
        checks.append(LimitCheck(cid, "max_batch_size", "pass",
                                 f"batch size {cell.batch_size} <= max_batch_size {limits.max_batch_size}"))

    if limits.max_beam_width is None:
        unknown("max_beam_width")
    elif cell.beam_width > limits.max_beam_width:
        slots = (limits.max_batch_size or 0) * limits.max_beam_width
        checks.append(LimitCheck(cid, "max_beam_width", "fail",
                                 f"num_beams {cell.beam_width} exceeds the engine's max_beam_width "
                                 f"{limits.max_beam_width} (KV cache holds {slots} beam slots, the "
                                 f"cell needs {cell.batch_size * cell.beam_width}); "
                                 + _rebuild(limits, max_beam_width=cell.beam_width)))
    else:
        checks.append(LimitCheck(cid, "max_beam_width", "pass",
                                 f"num_beams {cell.beam_width} <= max_beam_width {limits.max_beam_width}"))

    if longest_prompt is None:
        unknown("max_input_len") if limits.max_input_len is None else checks.append(
            LimitCheck(cid, "max_input_len", "unknown", "the engine cannot count prompt tokens"))
    elif limits.max_input_len is None:
        unknown("max_input_len")
    elif longest_prompt > limits.max_input_len:
        checks.append(LimitCheck(cid, "max_input_len", "fail",
                                 f"the longest prompt has {longest_prompt} tokens, over the engine's "
                                 f"max_input_len {limits.max_input_len} ({prompts_over_input} prompts "
                                 "too long); " + _rebuild(limits, max_input_len=longest_prompt)))
    else:
        checks.append(LimitCheck(cid, "max_input_len", "pass",
                                 f"longest prompt {longest_prompt} <= max_input_len {limits.max_input_len}"))

    limit = limits.sequence_limit
    if longest_prompt is None or limit is None:
        unknown("max_seq_len")
    elif longest_prompt + max_new_tokens > limit:
        need = longest_prompt + max_new_tokens
        fix = (_rebuild(limits, max_seq_len=need) if limits.max_seq_len is not None or
               limits.max_output_len is None else
               _rebuild(limits, max_output_len=need - (limits.max_input_len or 0)))
        checks.append(LimitCheck(cid, "max_seq_len", "fail",
                                 f"longest prompt {longest_prompt} + max_new_tokens {max_new_tokens} = "
                                 f"{need} exceeds the engine's sequence limit {limit}; {fix}"))
    else:
        checks.append(LimitCheck(cid, "max_seq_len", "pass",
                                 f"longest prompt {longest_prompt} + max_new_tokens {max_new_tokens} "
                                 f"<= {limit}"))
    return checks
