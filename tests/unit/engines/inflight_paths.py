"""What the in-flight engine tests share: an engine's in-flight path opened (asserted to be
one), and a pending request's answer read (asserted to be a Generation)."""

from __future__ import annotations

from typing import Protocol

from harness.config import DecodingSettings
from harness.engines.base import Generation, InFlight, NoInFlight, Pending


class Opens(Protocol):
    def in_flight(self, settings: DecodingSettings) -> InFlight | NoInFlight: ...


def opened(engine: Opens, settings: DecodingSettings) -> InFlight:
    path = engine.in_flight(settings)
    assert isinstance(path, InFlight), path
    return path


def answer(pending: Pending) -> Generation:
    got = pending.result()
    assert isinstance(got, Generation)
    return got
