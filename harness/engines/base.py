"""The engine interface every backend implements, and the data it returns.

A backend is a class with ``generate(prompts, settings) -> list[Generation]``: one call is
one engine batch, ``prompts[i]`` sits at batch position ``i``, and result ``i`` belongs to
prompt ``i``. Optional: ``info`` (an ``EngineInfo``), ``count_tokens(prompts)`` for the
input-length preflight, and ``close()``. The harness's own backends subclass ``EngineBase``,
which gives the optional methods their defaults; any other object with ``generate`` is
wrapped in ``AdoptedEngine`` when it is loaded, so later stages call the same methods on
every engine and never probe for them.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, runtime_checkable

from harness.config import DecodingSettings
from harness.model.engine import EngineInfo
from harness.model.limits import EngineLimits
from harness.model.vocab import FailureKind

# the interface a plug-in engine uses: its outputs, its record, and what it may raise
__all__ = [
    "AdoptedEngine",
    "BatchError",
    "Engine",
    "EngineBase",
    "EngineInfo",
    "FailureKind",
    "Generates",
    "Generation",
    "InFlight",
    "NoInFlight",
    "Pending",
    "RequestTiming",
    "as_engine",
    "as_generation",
    "class_label",
    "code_class",
    "generates",
    "said_count",
]


class BatchError(RuntimeError):
    """An engine batch that failed in a way the engine names (``kind``): its cell fails and
    the run goes on; the generate stage tells a later cell that failed the same way as the
    run's first failure."""

    def __init__(self, message: str, kind: FailureKind) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class RequestTiming:
    """When one prompt's request went out and its answer came back, in seconds from the start
    of its batch (the openai backend measures it; ``harness.engines.batching`` reads it to tell
    whether a server really ran a batch's requests together)."""

    sent: float  # the request's connection started
    written: float  # the request was on the wire
    first_byte: float  # the answer's status line arrived
    finished: float  # the answer's last byte arrived
    tokens: int | None = None  # tokens generated, as the server counted them (None: unknown)


@dataclass(frozen=True)
class Generation:
    """The output for one prompt: the best beam's text plus every beam kept; ``timing`` where
    the backend measured it (servers)."""

    text: str
    token_ids: tuple[int, ...] = ()
    beams: tuple[str, ...] = ()
    timing: RequestTiming | None = None
    # an in-flight request (harness.engines.inflight): the slot the engine says it ran in, and
    # the prompt tokens it says it served from a cache (None: the engine does not say)
    slot: int | None = None
    cached_tokens: int | None = None
    # seconds from its submission until the engine had its first token, its prompt prefilled
    # (None: the engine does not say)
    first_token: float | None = None


@runtime_checkable
class Engine(Protocol):
    """The small interface a backend implements (see the module docstring)."""

    info: EngineInfo
    limits: EngineLimits | None

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]: ...

    def count_tokens(self, prompts: Sequence[str]) -> list[int] | None: ...

    def close(self) -> None: ...

    def in_flight(self, settings: DecodingSettings) -> InFlight | NoInFlight: ...


class Generates(Protocol):
    """A user's engine as the harness first meets it: an object with ``generate(prompts,
    settings)``, whose signature and outputs are its own (``AdoptedEngine`` checks them)."""

    @property
    def generate(self) -> Callable[..., object]: ...


def generates(engine: object) -> TypeGuard[Generates]:
    """Whether ``engine`` has a ``generate`` to call."""
    return callable(getattr(engine, "generate", None))


class Pending(Protocol):
    """One in-flight request on its way: ``result()`` blocks until its answer is back."""

    def result(self) -> object: ...


@dataclass(frozen=True)
class NoInFlight:
    """An engine (or a beam width, a release line) without an in-flight path: the scheduled
    cells are reported not applicable for ``reason``, never passed."""

    reason: str


class InFlight(ABC):
    """An engine's in-flight path, open for one decoding setting: requests sent one by one join
    whatever the engine is already decoding. ``slots``: the most requests it decodes at once,
    where it says (None: not said); ``cache``: what a second request for the same prompt is
    served from, said in the report of a warm schedule."""

    slots: int | None = None
    cache: str = "the engine does not say whether it reuses cached prompt tokens"
    # whether each opening starts with slots that served nothing (a new scheduler, a new cache);
    # else (a server, a plug-in) a slot that served a request of an earlier schedule of the run
    # counts as reused
    fresh_slots: bool = False

    @abstractmethod
    def submit(self, prompt: str) -> Pending:
        """Send one request now; its answer comes from the ``Pending``'s ``result()``."""

    def close(self) -> None:  # noqa: B027 (a default, not an abstract method)
        """Stop the in-flight path (a background loop, a manager); nothing by default."""


class EngineBase(ABC):
    """What every backend shares: ``generate`` to implement, the optional methods with their
    defaults (a backend overrides what it can do). The harness calls only these methods."""

    info: EngineInfo
    limits: EngineLimits | None = None  # the build limits config.json records (None: none)
    # a transformers tokenizer, where the backend has one: --chat takes its chat template, and
    # checks that it has one (a backend narrows the type to what it calls itself)
    tokenizer: object = None

    @abstractmethod
    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        """One engine batch: ``prompts[i]`` at batch position ``i``, result ``i`` for it."""

    def count_tokens(self, prompts: Sequence[str]) -> list[int] | None:
        """Prompt lengths in tokens, for the input-length preflight; None: cannot count."""
        return None

    def close(self) -> None:  # noqa: B027 (a default, not an abstract method)
        """Free the engine's resources (GPU memory, server connections); nothing by default."""

    def in_flight(self, settings: DecodingSettings) -> InFlight | NoInFlight:
        """The engine's in-flight path for ``settings``, or why it has none (the default)."""
        return NoInFlight(f"the {self.info.backend} backend has no in-flight path")


class _PluginPending:
    """A plug-in's pending answer, read as a Generation."""

    def __init__(self, pending: object) -> None:
        self.pending = pending

    def result(self) -> Generation:
        result = getattr(self.pending, "result", None)
        if not callable(result):
            raise RuntimeError(
                f"generate_async returned a {type(self.pending).__name__} without result(); it returns "
                "an object whose result() gives the answer"
            )
        return as_generation(result())


class PluginInFlight(InFlight):
    """A plug-in's ``generate_async(prompt, settings)``, one call per request."""

    def __init__(self, submit: Callable[..., object], settings: DecodingSettings) -> None:
        self._submit, self.settings = submit, settings

    def submit(self, prompt: str) -> Pending:
        return _PluginPending(self._submit(prompt, self.settings))


class AdoptedEngine(EngineBase):
    """Any object with ``generate`` (a user's class), seen through ``EngineBase``: its own
    ``count_tokens``, ``close`` and other attributes where it has them, the defaults where not."""

    def __init__(self, engine: Generates, info: EngineInfo) -> None:
        self.engine = engine
        self.info = info

    # Any: the attributes of a user's engine are whatever its author gave it
    def __getattr__(self, name: str) -> Any:
        if name == "engine":  # not set yet (copy, pickle): never recurse
            raise AttributeError(name)
        return getattr(self.engine, name)

    @property  # EngineBase's class attribute would hide the engine's own from __getattr__
    def tokenizer(self) -> object:
        return getattr(self.engine, "tokenizer", None)

    @tokenizer.setter
    def tokenizer(self, value: object) -> None:
        setattr(self.engine, "tokenizer", value)  # noqa: B010 (Generates does not name it)

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        outputs: object = self.engine.generate(prompts, settings)
        if not isinstance(outputs, Sequence) or isinstance(outputs, (str, bytes)):
            raise RuntimeError(
                f"the engine returned {type(outputs).__name__} outputs for a batch "
                f"of {len(prompts)}; generate returns one Generation per prompt"
            )
        return [as_generation(o) for o in outputs]

    def count_tokens(self, prompts: Sequence[str]) -> list[int] | None:
        counter = getattr(self.engine, "count_tokens", None)
        # None: the engine cannot count; the answer's shape is checked by guard.count_tokens
        return counter(prompts) if callable(counter) else None

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if callable(close):
            close()

    def in_flight(self, settings: DecodingSettings) -> InFlight | NoInFlight:
        submit = getattr(self.engine, "generate_async", None)
        if not callable(submit):
            return NoInFlight(
                f"{code_class(self).__qualname__} defines no generate_async(prompt, settings), the in-flight "
                "entry point (docs/engines.md)"
            )
        return PluginInFlight(submit, settings)


def code_class(engine: object) -> type:
    """The class whose code decides an engine's outputs: a user's class, not the
    ``AdoptedEngine`` around it."""
    return type(engine.engine) if isinstance(engine, AdoptedEngine) else type(engine)


def as_generation(output: object) -> Generation:
    """One output of a user's engine as a Generation: a Generation as it is, a string as its
    text, an object with ``text`` (and ``beams``, ``token_ids``, and what an in-flight answer says:
    ``slot``, ``cached_tokens``, ``first_token``) by those; a text that is not
    a string counts as ""."""
    if isinstance(output, Generation):
        return output
    if isinstance(output, str):
        return Generation(text=output)
    text = getattr(output, "text", None)
    beams = getattr(output, "beams", None)
    ids = getattr(output, "token_ids", None)
    return Generation(
        text=text if isinstance(text, str) else "",
        beams=tuple(b if isinstance(b, str) else "" for b in beams)
        if isinstance(beams, (list, tuple))
        else (),
        token_ids=tuple(ids) if isinstance(ids, (list, tuple)) else (),
        slot=said_count(getattr(output, "slot", None)),
        cached_tokens=said_count(getattr(output, "cached_tokens", None)),
        first_token=said_seconds(getattr(output, "first_token", None)),
    )


def said_seconds(value: object) -> float | None:
    """A time an engine gave in seconds: a finite non-negative number, else not said."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def said_count(value: object) -> int | None:
    """A slot number or token count an engine gave: a non-negative int, else not said."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def class_label(engine: object) -> str:
    """``module:Class`` of an engine object, its name where nothing else names it."""
    return f"{type(engine).__module__}:{type(engine).__qualname__}"


def as_engine(
    engine: EngineBase | Generates, label: str | None = None, path: str | None = None
) -> EngineBase:
    """``engine`` itself when it is an ``EngineBase``, else an ``AdoptedEngine`` around it; one
    without an EngineInfo gets one named by ``label`` (default: its module:Class) and ``path``.
    Checks nothing: ``registry.adopt`` checks the interface of what a user hands in."""
    info = getattr(engine, "info", None)
    if not isinstance(info, EngineInfo):
        label = label or class_label(engine)
        info = EngineInfo(backend=label, path=path or label, identity=f"{label}:{path}" if path else label)
    if not isinstance(engine, EngineBase):
        return AdoptedEngine(engine, info)
    engine.info = info
    return engine
