"""What differs between TensorRT-LLM release lines, for the trtllm and llmapi backends.

Each rule names the line and where its behaviour lives (docs/trtllm-versions.md has the matrix,
with the source file and line of each):

- a runner's decoder serves one beam width: 0.9's ``GptSession`` fixes its decoder's mode at
  load (beam search when ``maxBeamWidth > 1``, sampling when 1) and refuses the other mode and
  any wider beam; the Python ``GenerationSession`` is configured by its first call; in-flight
  batching of ~0.10-0.13 refuses a width other than the executor's maximum. So the trtllm
  backend loads a runner per beam width (``max_beam_width=W`` for ``ModelRunnerCpp``, as
  TensorRT-LLM's own ``examples/run.py`` does; a fresh ``ModelRunner``), releasing the last one
  first (``release``);
- KV-cache block reuse: ``ModelRunnerCpp.from_dir(kv_cache_enable_block_reuse=...)`` where the
  release has it, off by default; 1.x's LLM API turns it on by default
  (``KvCacheConfig.enable_block_reuse``); the harness asks for it off unless --kv-cache-reuse on;
- 0.15/0.16 ``LlmArgs`` has no ``max_beam_width`` (a TypeError), the limit is
  ``BuildConfig.max_beam_width``; 1.0's PyTorch backend wants ``max_beam_width == best_of``,
  ``disable_overlap_scheduler=True`` and (in some releases) ``cuda_graph_config=None``;
- 0.15/0.16 ``LLM`` frees its executor only through ``_shutdown()``; later ones have ``shutdown()``;
  ``ModelRunnerCpp`` from 0.10 holds an ``Executor`` with ``shutdown()`` (``.session`` to 0.16,
  ``.executor`` in 1.x); 0.9's ``GptSession`` has none and is freed when released;
- the in-flight path (``harness.engines.trtllm_inflight``) needs the runner's Executor
  (``executor_of``): ``ModelRunnerCpp`` holds one from 0.10 on (``.session``, ``.executor`` in
  1.x); 0.9's holds a ``GptSession``, which has no requests to enqueue;
- engines of the 0.5-0.8 builders (legacy config.json) do not deserialize under the TensorRT
  that 0.9 and later pin: refused in one line.
"""

from __future__ import annotations

import gc
import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from harness.engines.protocols import Executor, RunnerClass
from harness.errors import EngineError, describe
from harness.model.engine import KvCacheReuse
from harness.model.vocab import CacheReuse, TrtllmRuntime

# how the trtllm backend's runners serve beam widths (report.json engine.details)
PER_WIDTH = {
    TrtllmRuntime.CPP: "ModelRunnerCpp.from_dir(max_beam_width=W) per beam width",
    TrtllmRuntime.PYTHON: "a fresh ModelRunner per beam width (its first call fixes the decoder's width)",
}
REUSE_KEYWORD = "kv_cache_enable_block_reuse"  # ModelRunnerCpp.from_dir, where the release has it
EXECUTOR_ATTRIBUTES = ("session", "executor")  # where ModelRunnerCpp keeps its Executor: to 0.16, 1.x


def legacy_refusal(path: Path, version: str) -> str:
    """One line for an engine of the 0.5-0.8 builders under a release that cannot read it."""
    return (
        f"{path}: a TensorRT-LLM 0.5-0.8 engine (legacy config.json with builder_config); it "
        f"does not deserialize under the TensorRT that TensorRT-LLM {version} pins (each "
        "release pins its own TensorRT build): rebuild it with this release's trtllm-build, "
        "or run it under the release that built it (its build limits can still be checked: "
        "python -m harness run --dry-run)"
    )


def takes_keyword(func: Callable[..., object], name: str) -> bool:
    """Whether ``func`` has a parameter ``name`` (positional-or-keyword or keyword-only)."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    param = params.get(name)
    return param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)


def shutdown(obj: object) -> None:
    """Free what a runner or LLM holds: ``shutdown()``, else 0.15/0.16's ``_shutdown()``, else a
    ModelRunnerCpp's Executor (``.session`` to 0.16, ``.executor`` in 1.x); nothing for objects
    that have none (0.9's GptSession, the Python session: freed when released)."""
    for target in (obj, getattr(obj, "session", None), getattr(obj, "executor", None)):
        for name in ("shutdown", "_shutdown"):
            method = getattr(target, name, None) if target is not None else None
            if callable(method):
                method()
                return


def executor_of(runner: object) -> Executor | None:
    """The ``tensorrt_llm.bindings.executor.Executor`` a runner holds (``ModelRunnerCpp.session``
    0.10-0.16, ``.executor`` in 1.x), by the methods the in-flight path calls; None for a runner
    without one (0.9's ``GptSession``, the Python session)."""
    for name in EXECUTOR_ATTRIBUTES:
        target = getattr(runner, name, None)
        if all(callable(getattr(target, m, None)) for m in ("enqueue_request", "await_responses")):
            return cast(Executor, target)
    return None


def release(slot: list[object]) -> None:
    """Shut down the one object in ``slot`` where it can be, then drop it. It is handed over in
    a list, which this empties, so that no caller's frame still holds it: what has no shutdown
    (0.9's GptSession) is freed here, cycles included, and the CUDA allocator's cache is
    returned before the next load."""
    obj = slot.pop()
    shutdown(obj)
    del obj
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # no torch, or no driver: nothing cached to return
        pass


@dataclass(frozen=True)
class Reuse:
    """The load keywords that set KV-cache block reuse, and what the report says of it."""

    status: KvCacheReuse
    kwargs: dict[str, object] = field(default_factory=dict)


def runner_reuse(runner_cls: RunnerClass, name: str, version: str, setting: CacheReuse) -> Reuse:
    """Block reuse for a ``tensorrt_llm.runtime`` runner: the from_dir keyword where the
    release has one; without it, the release reuses nothing and ``on`` is refused."""
    on = setting == CacheReuse.ON
    if takes_keyword(runner_cls.from_dir, REUSE_KEYWORD):
        return Reuse(
            KvCacheReuse(setting, f"{name}.from_dir({REUSE_KEYWORD}={on}), TensorRT-LLM {version}"),
            {REUSE_KEYWORD: on},
        )
    if on:
        raise EngineError(
            f"--kv-cache-reuse on: TensorRT-LLM {version}'s {name}.from_dir has no "
            f"{REUSE_KEYWORD} (this runner reuses no KV-cache blocks across "
            "requests): drop the option, or use a release that has it"
        )
    return Reuse(
        KvCacheReuse(
            CacheReuse.OFF, f"TensorRT-LLM {version}'s {name} has no KV-cache block reuse across requests"
        )
    )


def cache_sentence(status: KvCacheReuse, counted: str) -> str:
    """What a prompt sent again in flight is served from, by the block reuse the engine was
    loaded with (a warm schedule's report says it); ``counted``: whether the release says how
    many prompt tokens came from reused blocks."""
    if status.setting == CacheReuse.ON:
        return (
            f"KV-cache block reuse is on ({status.how}): a prompt sent again may be served its "
            f"prefill from blocks an earlier request left; {counted}"
        )
    if status.setting == CacheReuse.OFF:
        return f"KV-cache block reuse is off ({status.how}): a prompt sent again is prefilled afresh"
    return f"KV-cache block reuse is not known ({status.how})"


def llm_reuse(version: str, setting: CacheReuse) -> Reuse:
    """Block reuse for the LLM API: ``kv_cache_config=KvCacheConfig(enable_block_reuse=...)``
    (``tensorrt_llm.llmapi.KvCacheConfig``; 1.x's ``llm_args.py`` defaults it to True, so it is
    always passed); a release without that class is refused for ``on`` and unknown otherwise."""
    try:
        config_cls = importlib.import_module("tensorrt_llm.llmapi").KvCacheConfig
    except (ImportError, AttributeError):
        if setting == CacheReuse.ON:
            raise EngineError(
                f"--kv-cache-reuse on: TensorRT-LLM {version} has no "
                "tensorrt_llm.llmapi.KvCacheConfig to ask for it: drop the option"
            ) from None
        return Reuse(
            KvCacheReuse(
                CacheReuse.UNKNOWN,
                f"TensorRT-LLM {version} has no tensorrt_llm.llmapi.KvCacheConfig: its default decides",
            )
        )
    on = setting == CacheReuse.ON
    return Reuse(
        KvCacheReuse(
            setting, f"LLM(kv_cache_config=KvCacheConfig(enable_block_reuse={on})), TensorRT-LLM {version}"
        ),
        {"kv_cache_config": config_cls(enable_block_reuse=on)},
    )


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
