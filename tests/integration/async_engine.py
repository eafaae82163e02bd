"""A user's engine with the in-flight entry point (``generate_async``, modelled on
``LLM.generate_async``): the toy engine's answers, each request served by one of four slots
after a short wait, so requests overlap; with ``TOY_STALE`` set, a request in a slot that served
another before answers off-topic (a stale slot never reset)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tests.integration.toy_engine import ToyEngine

if TYPE_CHECKING:
    from harness.config import DecodingSettings
    from harness.engines.base import Generation

STALE = bool(os.environ.get("TOY_STALE"))


@dataclass(frozen=True)
class Answer:
    text: str
    slot: int
    cached_tokens: int


class AsyncToyEngine(ToyEngine):
    def __init__(self, path: str | None) -> None:
        super().__init__(path)
        self.pool = ThreadPoolExecutor(4)
        self.lock = threading.Lock()
        self.free = [0, 1, 2, 3]
        self.served: set[int] = set()

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        return super().generate(prompts, settings)

    def _serve(self, prompt: str, settings: DecodingSettings) -> Answer:
        with self.lock:
            slot = self.free.pop(0)
            stale = STALE and slot in self.served
            self.served.add(slot)
        time.sleep(0.02)
        text = "the the weather was nice" if stale else super().generate([prompt], settings)[0].text
        with self.lock:
            self.free.append(slot)
        return Answer(text, slot, 0)

    def generate_async(self, prompt: str, settings: DecodingSettings) -> Future[Answer]:
        return self.pool.submit(self._serve, prompt, settings)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
