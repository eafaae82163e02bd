from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from harness.config import DecodingSettings
from harness.engines.base import EngineInfo, Generation
from harness.engines.watchdog import BatchTimeout, BatchTimeoutEngine

SETTINGS = DecodingSettings(beam_width=1, max_new_tokens=4)


class Scripted:
    """Test double of an engine: answers, raises, or blocks until released."""

    def __init__(self) -> None:
        self.info = EngineInfo(backend="test", path="p", identity="i")
        self.release = threading.Event()
        self.block = False
        self.running = 0
        self.most_running = 0
        self.closed = False

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        return [1 for _ in prompts]

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            if prompts == ["boom"]:
                raise MemoryError("CUDA out of memory")
            if self.block:
                self.release.wait(30)
            return [Generation(text=p.upper()) for p in prompts]
        finally:
            self.running -= 1

    def close(self) -> None:
        self.closed = True


def test_passes_results_errors_and_attributes_through() -> None:
    inner = Scripted()
    engine = BatchTimeoutEngine(inner, 5)
    assert engine.generate(["a", "b"], SETTINGS) == [Generation("A"), Generation("B")]
    with pytest.raises(MemoryError, match="CUDA out of memory"):
        engine.generate(["boom"], SETTINGS)
    assert engine.info is inner.info and engine.count_tokens(["x"]) == [1]
    engine.close()
    assert inner.closed


def test_a_hung_call_times_out_and_the_engine_never_runs_two_calls() -> None:
    inner = Scripted()
    engine = BatchTimeoutEngine(inner, 0.2)
    inner.block = True
    with pytest.raises(BatchTimeout, match=r"within --batch-timeout 0.2s \(batch of 1 at beam width 1\)"):
        engine.generate(["a"], SETTINGS)
    inner.block = False
    with pytest.raises(BatchTimeout, match="not sent: the engine is still busy"):
        engine.generate(["b"], SETTINGS)  # waited one more timeout, still busy: stuck
    with pytest.raises(BatchTimeout, match="not sent"):
        engine.generate(["c"], SETTINGS)  # fails at once now
    engine.close()
    assert not inner.closed  # not closed under a running call
    inner.release.set()
    engine._hung.join(5)  # type: ignore[union-attr]
    assert engine.generate(["d"], SETTINGS) == [Generation("D")]  # back once the call returned
    assert inner.most_running == 1
