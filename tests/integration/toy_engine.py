"""A user's engine plugged in with --engine module:Class (the README's interface).

It 'summarizes' by echoing the first words of the document. With ``BROKEN_FROM`` set, batch
positions from that index on return off-topic text whenever the batch holds more than one
prompt: a position-dependent fault with no model involved.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.config import DecodingSettings
    from harness.engines.base import Generation

BROKEN_FROM = int(os.environ.get("TOY_BROKEN_FROM", "-1"))


class ToyEngine:
    def __init__(self, path: str | None, broken_from: int | None = None) -> None:
        self.path = path
        self.broken_from = BROKEN_FROM if broken_from is None else broken_from

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        from harness.engines.base import Generation

        out: list[Generation] = []
        for position, prompt in enumerate(prompts):
            words = prompt.split()[: 12 + settings.beam_width]
            if 0 <= self.broken_from <= position and len(prompts) > 1:
                words = ["the", "the", "weather", "was", "nice"] * 3
            out.append(Generation(text=" ".join(words)))
        return out
