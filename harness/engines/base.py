"""The engine interface every backend implements, and the data it returns.

A backend is a class with ``generate(prompts, settings) -> list[Generation]``: one call is
one engine batch, ``prompts[i]`` sits at batch position ``i``, and result ``i`` belongs to
prompt ``i``. Optional: ``info`` (an ``EngineInfo``), ``count_tokens(prompts)`` for the
input-length preflight, and ``close()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from harness.config import DecodingSettings


@dataclass(frozen=True)
class Generation:
    """The output for one prompt: the best beam's text plus every beam kept."""

    text: str
    token_ids: tuple[int, ...] = ()
    beams: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineInfo:
    """What the report and the goldens need to know about an engine."""

    backend: str
    path: str
    identity: str  # the model's identity (weights hash): goldens are keyed by it
    config: dict[str, Any] | None = None  # the engine's config.json, when it has one
    details: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    """The small interface a backend implements (see the module docstring)."""

    info: EngineInfo

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        ...

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        ...

    def close(self) -> None:
        ...
