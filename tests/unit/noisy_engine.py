"""Test engines for the overlap, shard and merge tests (plain user engines through the README's
``generate(prompts, settings)`` interface; not TensorRT-LLM doubles).

``NoisyEngine`` echoes the start of each prompt; in batches of more than one, positions from
``from_position`` on damage about a quarter of the prompts (chosen by a hash of prompt and
position), so drops have prompt-to-prompt noise and p-values are moderate: Holm's
correction over more positions can change a verdict. ``salt`` changes every output a
little (another engine build). ``delay`` makes each call take that long (a slow engine).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

from harness.config import DecodingSettings
from harness.engines.base import Generation

WORDS = (
    "harbour council budget river school storm bridge market festival museum rail "
    "library station farmers teachers hospital ferry tower election vote park"
).split()


class NoisyEngine:
    def __init__(
        self, path: str | None = None, *, from_position: int = 1, salt: int = 0, delay: float = 0.0
    ) -> None:
        self.from_position, self.salt, self.delay = from_position, salt, delay
        self.calls: list[float] = []  # start time of each generate call

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        self.calls.append(time.perf_counter())
        if self.delay:
            time.sleep(self.delay)
        out = []
        for position, prompt in enumerate(prompts):
            words = prompt.split()[: 10 + settings.beam_width + self.salt]
            key = f"{prompt}|{position}|{settings.beam_width}".encode()
            hit = hashlib.sha256(key).digest()[0] % 4 == 0
            if len(prompts) > 1 and position >= self.from_position and hit:
                words = words[: len(words) // 2] + ["unrelated"] * (3 + position % 3)
            out.append(Generation(text=" ".join(words)))
        return out


def write_dataset(path: Path, count: int = 24) -> Path:
    """``count`` short documents with distinct words and summaries."""
    rows = []
    for i in range(count):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(18)]
        rows.append({"id": f"d{i}", "text": f"story {i}: " + " ".join(words), "summary": " ".join(words[:8])})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
