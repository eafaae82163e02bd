"""What differs between TensorRT-LLM release lines, for the trtllm and llmapi backends.

Each rule names the line and where its behaviour lives (docs/trtllm-versions.md has the matrix):

- in-flight batching of roughly 0.10-0.13 refuses a request whose beam width differs from the
  executor's ``max_beam_width`` ("Request with beam width 1 differs from the max beam width 3",
  NVIDIA/TensorRT-LLM #1282, tensorrtllm_backend #154): ``ModelRunnerCpp`` is then loaded per
  beam width, and a release outside that range that still refuses is recognised by the text;
- 0.15/0.16 ``LlmArgs`` has no ``max_beam_width`` (a TypeError), the limit is
  ``BuildConfig.max_beam_width``; 1.0's PyTorch backend wants ``max_beam_width == best_of``,
  ``disable_overlap_scheduler=True`` and (in some releases) ``cuda_graph_config=None``;
- 0.15/0.16 ``LLM`` frees its executor only through ``_shutdown()``; later ones have ``shutdown()``;
  ``ModelRunnerCpp`` from 0.10 holds an ``Executor`` (``runner.session``) with ``shutdown()``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

from harness.errors import describe

WIDTH_REFUSAL = "differs from the max beam width"
REFUSING_RELEASES = ((0, 10), (0, 14))  # [from, to): the in-flight batching of these releases


def release(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a TensorRT-LLM version string ("0.13.0.dev2024082000" -> (0, 13))."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def refuses_other_beam_widths(version: str) -> bool:
    """Whether this release's ModelRunnerCpp refuses a beam width other than its maximum."""
    found = release(version)
    return found is not None and REFUSING_RELEASES[0] <= found < REFUSING_RELEASES[1]


def is_width_refusal(exc: BaseException) -> bool:
    return WIDTH_REFUSAL in str(exc)


def takes_keyword(func: Callable[..., Any], name: str) -> bool:
    """Whether ``func`` has a parameter ``name`` (positional-or-keyword or keyword-only)."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    param = params.get(name)
    return param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)


def shutdown(obj: Any) -> None:
    """Free what a runner or LLM holds: ``shutdown()``, else 0.15/0.16's ``_shutdown()``, else a
    ModelRunnerCpp's Executor (``session.shutdown()``); nothing for objects that have none."""
    for target in (obj, getattr(obj, "session", None)):
        for name in ("shutdown", "_shutdown"):
            method = getattr(target, name, None) if target is not None else None
            if callable(method):
                method()
                return


def rejected_keyword(exc: BaseException, keywords: Iterable[str]) -> str | None:
    """The keyword an LLM constructor refused: 0.15/0.16's dataclass TypeError ("unexpected
    keyword argument 'x'") or 1.x's ValueError ("LLM got invalid argument: x")."""
    if not isinstance(exc, (TypeError, ValueError)):
        return None
    text = str(exc)
    for key in keywords:
        if f"'{key}'" in text or text.rstrip().endswith(f"invalid argument: {key}"):
            return key
    return None


class LoadFailures:
    """A reload that failed once fails its later cells with the same one-line message, without
    trying again (a load can take minutes and the GPU memory it needs will not appear)."""

    def __init__(self) -> None:
        self._seen: dict[int | None, str] = {}

    def check(self, width: int | None) -> None:
        if width in self._seen:
            raise RuntimeError(self._seen[width])

    def record(self, width: int | None, what: str, exc: BaseException) -> RuntimeError:
        self._seen[width] = f"{what} failed: {describe(exc)}"
        return RuntimeError(self._seen[width])
