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
    "RequestTiming",
    "as_engine",
    "as_generation",
    "class_label",
    "code_class",
    "generates",
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


@runtime_checkable
class Engine(Protocol):
    """The small interface a backend implements (see the module docstring)."""

    info: EngineInfo
    limits: EngineLimits | None

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]: ...

    def count_tokens(self, prompts: Sequence[str]) -> list[int] | None: ...

    def close(self) -> None: ...


class Generates(Protocol):
    """A user's engine as the harness first meets it: an object with ``generate(prompts,
    settings)``, whose signature and outputs are its own (``AdoptedEngine`` checks them)."""

    @property
    def generate(self) -> Callable[..., object]: ...


def generates(engine: object) -> TypeGuard[Generates]:
    """Whether ``engine`` has a ``generate`` to call."""
    return callable(getattr(engine, "generate", None))


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


def code_class(engine: object) -> type:
    """The class whose code decides an engine's outputs: a user's class, not the
    ``AdoptedEngine`` around it."""
    return type(engine.engine) if isinstance(engine, AdoptedEngine) else type(engine)


def as_generation(output: object) -> Generation:
    """One output of a user's engine as a Generation: a Generation as it is, a string as its
    text, an object with ``text`` (and ``beams``, ``token_ids``) by those; a text that is not
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
    )


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
