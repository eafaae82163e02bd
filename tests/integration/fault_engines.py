"""Test-only engines (doubles of a user's ``module:Class`` engine, no model) for run-time faults.

They echo the first words of each prompt, as ``toy_engine.ToyEngine`` does, and misbehave in
one chosen way. Configured by keyword or, for ``--engine fault_engines:Class`` in a
subprocess, by environment variables:

- ``FAULT_HANG_CELL`` "BxW": the first call of that cell (batch size B, beam width W) sleeps
  ``FAULT_HANG_SECONDS`` (default 600) before answering;
- ``FAULT_SLEEP`` seconds every call sleeps (to kill a run in the middle of generating);
- ``FAULT_VARIANT`` a word appended to every output (so that two recordings differ).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from harness.engines.base import Generation

if TYPE_CHECKING:
    from harness.config import DecodingSettings, EngineOptions


def echo(prompt: str, beam_width: int, variant: str = "") -> str:
    words = prompt.split()[: 12 + beam_width]
    return " ".join(words + ([variant] if variant else []))


class Echo:
    """A healthy engine: the same text at every position; optional sleep and variant."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.sleep = float(os.environ.get("FAULT_SLEEP", "0"))
        self.variant = os.environ.get("FAULT_VARIANT", "")
        self.calls = 0

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        self.calls += 1
        if self.sleep:
            time.sleep(self.sleep)
        return [Generation(text=echo(p, settings.beam_width, self.variant)) for p in prompts]


class Hangs(Echo):
    """The first call of one cell takes ``seconds`` (or until ``release`` is set)."""

    def __init__(
        self, path: str | None = None, *, cell: str | None = None, seconds: float | None = None
    ) -> None:
        super().__init__(path)
        spec = cell or os.environ.get("FAULT_HANG_CELL", "2x1")
        self.cell = tuple(int(x) for x in spec.split("x"))
        self.seconds = seconds if seconds is not None else float(os.environ.get("FAULT_HANG_SECONDS", "600"))
        self.release = threading.Event()
        self.hung = 0
        self.finished_hung_call = threading.Event()

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        if (len(prompts), settings.beam_width) == self.cell and not self.hung:
            self.hung += 1
            self.release.wait(self.seconds)
            self.finished_hung_call.set()
        return super().generate(prompts, settings)


class OddOutputs(Echo):
    """Batch size 1 answers normally; in larger batches each position returns something odd."""

    ODD: tuple[Callable[[str], object], ...] = (
        lambda p: Generation(text=""),  # empty
        lambda p: None,  # no Generation at all
        lambda p: Generation(text=None),  # type: ignore[arg-type]  # no text
        lambda p: "a plain string " + p.split()[0],  # a str instead of a Generation
        lambda p: Generation(text="bad bytes \udcff\udcfe " + p.split()[0]),  # lone surrogates
        lambda p: Generation(text="\x00\x1b[31m<script>alert(1)</script>\u202e\ufeff"),
        lambda p: Generation(text=" ".join(["word"] * 20000)),  # very long
        lambda p: Generation(text="<pad> <pad> <pad>"),  # padding decoded as text
    )

    # a faulty engine: its outputs are not all Generations, which is the fault under test
    def generate(  # type: ignore[override]
        self, prompts: Sequence[str], settings: DecodingSettings
    ) -> list[Generation] | list[object]:
        good = super().generate(prompts, settings)
        if len(prompts) == 1:
            return good
        return [self.ODD[i % len(self.ODD)](p) for i, p in enumerate(prompts)]


class WrongCount(Echo):
    """Batches larger than 1 get one output too few, or None instead of a list."""

    # a faulty engine: None instead of a list is the fault under test
    def generate(  # type: ignore[override]
        self, prompts: Sequence[str], settings: DecodingSettings
    ) -> list[Generation] | None:
        good = super().generate(prompts, settings)
        if len(prompts) == 1:
            return good
        return None if settings.beam_width == 2 else good[:-1]


RAISES: dict[str, Callable[[], Exception]] = {
    # what CUDA-backed engines raise, by kind (the texts of torch and TensorRT-LLM)
    "oom": lambda: MemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.11 GiB "
        "total capacity; 77.02 GiB already allocated)"
    ),
    "cuda": lambda: RuntimeError("CUDA error: an illegal memory access was encountered"),
    "refusal": lambda: RuntimeError("Num beams (2) exceeds the engine or specified limit (1)"),
    "value": lambda: ValueError("max_new_tokens must be positive"),
}


class Raises(Echo):
    """``generate`` raises ``FAULT_RAISE`` (a key of RAISES) for cell ``FAULT_RAISE_CELL`` "BxW"."""

    def __init__(self, path: str | None = None) -> None:
        super().__init__(path)
        self.kind = os.environ.get("FAULT_RAISE", "oom")
        self.cell = tuple(int(x) for x in os.environ.get("FAULT_RAISE_CELL", "4x2").split("x"))

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        if (len(prompts), settings.beam_width) == self.cell:
            raise RAISES[self.kind]()
        return super().generate(prompts, settings)


class CloseRaises(Echo):
    """Generates normally; ``close()`` raises, as a CUDA context torn down early does."""

    def close(self) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered (in close)")


class CountRaises(Echo):
    """``count_tokens`` raises (a tokenizer that cannot read the prompts)."""

    def count_tokens(self, prompts: Sequence[str]) -> list[int] | None:
        raise ValueError("tokenizer.json: unknown normalizer")


class CountsWrong(Echo):
    """``count_tokens`` answers with the wrong shape (one number for the whole batch)."""

    # a faulty engine: one number instead of a list is the fault under test
    def count_tokens(self, prompts: Sequence[str]) -> int:
        return 7


class OptionsEcho(Echo):
    """Reads the engine options, as the trtllm backend does: the end id and the tokenizer
    folder's content change its outputs."""

    def __init__(self, path: str | None = None, options: EngineOptions | None = None) -> None:
        super().__init__(path)
        self.options = options

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        from pathlib import Path

        assert self.options is not None  # the harness passes options to a class that takes them
        tok = self.options.tokenizer
        mark = (Path(tok) / "vocab.txt").read_text().strip() if tok else ""
        return [
            Generation(text=f"{echo(p, settings.beam_width)} end{self.options.end_id} {mark}")
            for p in prompts
        ]


class Runaway(Echo):
    """Never stops at max_new_tokens: every output is the prompt's words followed by
    ``RUNAWAY_WORDS`` (default 20,000) more (a missing end id, a broken stop criterion)."""

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        tail = " ".join(f"w{i % 97}" for i in range(int(os.environ.get("RUNAWAY_WORDS", "20000"))))
        return [Generation(text=f"{echo(p, settings.beam_width)} {tail}") for p in prompts]


class Interrupts(Echo):
    """Ctrl-C arrives during the ``FAULT_INTERRUPT_CALL``-th call (default 3): it raises
    KeyboardInterrupt, as SIGINT does in the main thread."""

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        if self.calls + 1 == int(os.environ.get("FAULT_INTERRUPT_CALL", "3")):
            raise KeyboardInterrupt
        return super().generate(prompts, settings)
