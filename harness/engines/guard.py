"""Calls into a backend besides ``generate``, guarded the way ``generate`` is.

``generate`` failing fails its cell (harness.stages.generate); loading failing is one
EngineError line (harness.engines.registry). The other calls a stage makes are here:

- ``count_tokens`` (prepare): raising, or returning something that is not one token count
  per prompt, is one EngineError line, before anything is generated;
- ``close`` (after the run): raising is a warning on stderr; the run and its report are kept,
  since every output already exists.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.engines.base import Engine
from harness.errors import EngineError, HarnessError, describe
from harness.outside import clean, say


def label(engine: Engine) -> str:
    """How messages name an engine: its backend, and its path where that says more."""
    info = engine.info
    return info.backend if info.path in ("", info.backend) else f"{info.backend} engine {info.path}"


def count_tokens(engine: Engine, prompts: Sequence[str]) -> tuple[int, ...] | None:
    """The engine's prompt lengths (None: it cannot count); EngineError when it fails."""
    try:
        counted = engine.count_tokens(list(prompts))
    except HarnessError:
        raise
    except Exception as exc:
        raise EngineError(
            f"{label(engine)}: count_tokens raised {describe(exc)}; fix the engine's "
            "tokenizer, or have count_tokens return None to skip the input-length "
            "check"
        ) from None
    if counted is None:
        return None
    try:
        lengths = tuple(counted)
    except TypeError:
        lengths = ()
    if len(lengths) != len(prompts) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in lengths
    ):
        raise EngineError(
            f"{label(engine)}: count_tokens returned {type(counted).__name__} for "
            f"{len(prompts)} prompts; it returns one token count (an int >= 0) per "
            "prompt, or None"
        )
    return lengths


def close(engine: Engine | None) -> str | None:
    """Close the engine; a failure is a warning (printed and returned), never a lost run."""
    if engine is None:
        return None
    try:
        engine.close()
    except Exception as exc:
        warning = (
            f"warning: {label(engine)}: close() raised {describe(exc)}; every output was "
            "already kept, so the run and its report stand"
        )
        say(warning)
        return clean(warning)
    return None
