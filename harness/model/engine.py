"""The engine under test as a run records it: its backend, folder, identity and files, and
whether it reuses KV-cache blocks across requests."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.model.vocab import CacheReuse


@dataclass(frozen=True)
class EngineFile:
    """One file of the engine directory, by content."""

    name: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class KvCacheReuse:
    """Whether KV-cache (prefix) reuse was off, on or unknown in a run, and how that is known:
    the setting passed and where the release reads it, or why it could not be controlled."""

    setting: CacheReuse
    how: str


UNSAID_REUSE = KvCacheReuse(
    CacheReuse.UNKNOWN,
    "the engine does not say whether it serves a prompt's prefill from KV-cache blocks of earlier requests",
)


@dataclass(frozen=True)
class EngineInfo:
    """What the report, the goldens and the generation cache know of an engine. ``backend``
    is a word of ``Backend`` for the harness's own backends, a plug-in's ``module:Class``
    otherwise; ``identity`` keys the goldens (the weights' hash where the backend can read
    it); ``details`` is what the backend says of itself once loaded (device, dtype, runner);
    ``files`` are filled in by the report stage."""

    path: str
    backend: str
    identity: str
    details: dict[str, object] = field(default_factory=dict)
    files: tuple[EngineFile, ...] = ()
    kv_cache_reuse: KvCacheReuse = UNSAID_REUSE
