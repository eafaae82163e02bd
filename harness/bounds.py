"""Every bound the harness puts on what comes from outside, in one place.

Numbers are bounded where they are parsed (option values by ``harness.config``, config.json
keys by ``harness.limits.engine_config``), JSON documents by their nesting depth where they
are read, and the text that is scored by a multiple of ``--max-new-tokens``; each refusal
names the option, key or file. docs/reliability.md lists the figures.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.model.json import Json

DAY_S = 86_400.0
MAX_BATCH_SIZE = 1 << 16  # batch sizes and max_batch_size (TensorRT-LLM builds use <= 2048-8192)
MAX_BEAM_WIDTH = 1024  # beam widths and max_beam_width
MAX_TOKENS = 1 << 22  # sequence lengths in tokens (4M: beyond any model's context)
MAX_NEW_TOKENS = 1 << 16  # --max-new-tokens: what is scored is a multiple of it
MAX_LENGTH_PENALTY = 10.0  # beam search raises lengths to this power (1e308 overflows)
MAX_RETRIES = 100
INT32_MAX = (1 << 31) - 1  # any other config.json integer (TensorRT-LLM stores them as int32)
MAX_CONFIG_NUMBER = 1e18  # config.json floats (rope_theta and the like are far smaller)


@dataclass(frozen=True)
class Range:
    """The values an option or key may take (inclusive, but for an open low end; None:
    unbounded on that side), and why. Each option declares its own (``harness.config``)."""

    low: float | None = None
    high: float | None = None
    why: str = ""
    open_low: bool = False

    def problem(self, value: float) -> str | None:
        """Why ``value`` is outside the range (None: within it)."""
        why = f" ({self.why})" if self.why else ""
        if self.high is not None and value > self.high:
            return f"must be at most {self.high:g}{why}"
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return f"must be {'more than' if self.open_low else 'at least'} {self.low:g}{why}"
        return None


# The bounds options share (harness.config declares each option's own)
SECONDS = Range(None, DAY_S, "one day; longer is a hang")
BATCH_SIZE = Range(None, MAX_BATCH_SIZE, "the largest max_batch_size an engine may have")
BEAM_WIDTH = Range(None, MAX_BEAM_WIDTH, "the largest max_beam_width an engine may have")
SEQUENCE = Range(None, MAX_TOKENS, "the longest sequence the harness reads")
TOKEN_ID = Range(None, INT32_MAX, "token ids are int32")
PORT = Range(None, 65_535, "TCP ports are 0-65535")


# config.json integers, by key (in any section and layout); other keys: INT32_MAX.
CONFIG_MAXIMA: dict[str, int] = {
    "max_batch_size": MAX_BATCH_SIZE,
    "max_beam_width": MAX_BEAM_WIDTH,
    "max_input_len": MAX_TOKENS,
    "max_seq_len": MAX_TOKENS,
    "max_output_len": MAX_TOKENS,
    "max_num_tokens": 1 << 24,
    "num_hidden_layers": 4096,
    "num_layers": 4096,
    "num_attention_heads": 4096,
    "num_heads": 4096,
    "num_key_value_heads": 4096,
    "num_kv_heads": 4096,
    "head_size": 1 << 16,
    "hidden_size": 1 << 20,
    "intermediate_size": 1 << 22,
    "vocab_size": 1 << 24,
    "tp_size": 4096,
    "pp_size": 4096,
    "tensor_parallel": 4096,
    "pipeline_parallel": 4096,
    "tokens_per_block": 1 << 16,
}


def config_int_too_large(key: str, value: int) -> str | None:
    """Why a config.json integer is too large to be a real build limit or model size."""
    limit = CONFIG_MAXIMA.get(key, INT32_MAX)
    return f"is {value}, above {limit}, more than any engine has" if value > limit else None


# JSON documents from outside (config.json, report.json, goldens, cache entries, shard rows)

MAX_JSON_DEPTH = 64  # the harness writes at most 6 levels; 64 leaves room for any real config


class TooDeep(ValueError):
    """A JSON document nested deeper than MAX_JSON_DEPTH."""


def json_depth_ok(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests at most ``limit`` arrays/objects deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def loads(text: str | bytes) -> Json:
    """``json.loads`` for documents from outside: TooDeep (a ValueError) when nested deeper
    than MAX_JSON_DEPTH, also where the parser itself would exhaust the stack."""
    try:
        value: Json = json.loads(text)
    except RecursionError:
        raise TooDeep(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    if not json_depth_ok(value):
        raise TooDeep(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return value


# What is scored: ROUGE-L is quadratic in length, so each output is scored on its first
# SCORED_WORDS_PER_TOKEN x --max-new-tokens words (and at most SCORED_CHARS_PER_TOKEN x
# --max-new-tokens characters); an honest output of max_new_tokens tokens is far shorter.

SCORED_WORDS_PER_TOKEN = 8
SCORED_CHARS_PER_TOKEN = 64
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class ScoringCap:
    """How much of each output is scored, for one --max-new-tokens."""

    words: int
    chars: int

    @classmethod
    def for_tokens(cls, max_new_tokens: int) -> ScoringCap:
        return cls(
            words=SCORED_WORDS_PER_TOKEN * max_new_tokens, chars=SCORED_CHARS_PER_TOKEN * max_new_tokens
        )

    def describe(self) -> str:
        return (
            f"{SCORED_WORDS_PER_TOKEN} x --max-new-tokens words ({self.words}, at most "
            f"{self.chars} characters)"
        )

    def cut(self, text: str) -> str:
        """``text`` itself when within the cap, else its longest prefix that is."""
        if len(text) <= self.words:  # fewer characters than words allowed
            return text
        head = text[: self.chars]
        words = _WORD.finditer(head)
        last = next(itertools.islice(words, self.words - 1, None), None)
        if last is None or next(words, None) is None:  # at most ``words`` words
            return head
        return head[: last.end()]

    def cut_row(self, row: Sequence[str | None]) -> tuple[str | None, ...]:
        """Every text of a row cut to the cap (None: no text there)."""
        return tuple(None if t is None else self.cut(t) for t in row)
