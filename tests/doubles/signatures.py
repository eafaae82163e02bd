"""Long parameter lists of the TEST DOUBLES of ``tensorrt_llm``, declared as text.

Each release's ``from_dir``, ``generate`` and ``LLM.__init__`` take many parameters, and each
release's list is its own (parameters added, keyword-only ``*``, other defaults). A double
declares its release's list once, as that release's source writes it less the annotations
(binding reads names, kinds and defaults only): ``@takes("engine_dir, *, lora_dir=None, ...")``.
The method then has that ``__signature__`` (what the adapters' ``inspect.signature`` checks
read), every call is bound against it, so that a call the release refuses is refused with a
TypeError, and the body gets the bound arguments, defaults applied, as one mapping. This is
test scaffolding, not a model of anything.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

Args = dict[str, Any]  # a call's arguments by parameter name, defaults applied
_R = TypeVar("_R")


def parse(params: str) -> inspect.Signature:
    """The signature of ``def _(<params>)``: Python's own grammar reads the list."""
    namespace: dict[str, Any] = {}
    exec(compile(f"def _({params}):\n    pass\n", "<signature>", "exec"), namespace)
    return inspect.signature(namespace["_"])


def takes(params: str) -> Callable[[Callable[[Any, Args], _R]], Callable[..., _R]]:
    """A method declared with the parameter list ``params`` (after its ``self``/``cls``); its body
    is ``def name(self, a: Args)`` and reads ``a["engine_dir"]``, ``a["kwargs"]``, ..."""

    def declare(body: Callable[[Any, Args], _R]) -> Callable[..., _R]:
        owner = next(iter(inspect.signature(body).parameters))  # self or cls, as the body names it
        signature = parse(f"{owner}, {params}")

        @functools.wraps(body)
        def call(*args: Any, **kwargs: Any) -> _R:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as error:  # in Python's own words: "f() got an unexpected keyword ..."
                raise TypeError(f"{body.__qualname__}() {error}") from None
            bound.apply_defaults()
            values = dict(bound.arguments)
            return body(values.pop(owner), values)

        call.__signature__ = signature  # type: ignore[attr-defined]  # what inspect.signature reads
        return call

    return declare
