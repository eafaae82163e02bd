"""The ``llmapi`` backend: TensorRT-LLM's LLM API (``tensorrt_llm.LLM`` and ``SamplingParams``).

For an engine directory (config.json with ``build_config``) and for a checkpoint (a Hugging
Face or TensorRT-LLM checkpoint folder), with ``--backend llmapi``. Calls follow
trtllm-facts §3:

- greedy: ``SamplingParams(max_tokens=N, top_k=1, end_id=..., pad_id=...)``; beam search of
  width W: ``use_beam_search=True, n=W, best_of=W`` (TensorRT-LLM 0.15 on), plus
  ``length_penalty`` and ``early_stopping``; ``outputs[0]`` (beam 0) is scored and every
  beam is kept;
- one planned batch is one ``LLM.generate(prompts, sampling_params)`` call, prompts in
  position order.

What a batch position means here: the LLM API queues each prompt of the call as its own
request, in list order, and its in-flight batching scheduler decides which requests share a
step. Position ``i`` is therefore the ``i``-th request submitted within one ``generate``
call, not a row the harness controls; a position-dependent fault shows up only as far as
the submission order shapes the scheduler's batches.

Engine directories are loaded once (in 1.x through ``tensorrt_llm._tensorrt_engine.LLM``)
and refuse a beam width above their ``max_beam_width`` with their own ValueError, which
fails that cell. Checkpoints run on the PyTorch backend, which requires every request's
beam width to equal the LLM's ``max_beam_width``: the LLM is rebuilt with
``max_beam_width=W`` whenever the beam width changes. ``tensorrt_llm`` is imported when an
engine is constructed, never when this module is.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.config import DecodingSettings, EngineOptions
from harness.engines.base import EngineBase, EngineInfo, Generation
from harness.engines.tokenizer import load_tokenizer
from harness.engines.trtllm import engine_files, require_tensorrt_llm
from harness.errors import EngineError
from harness.limits.engine_config import load_config_json, read_engine_config
from harness.storage.fingerprint import weights_identity

CHECKPOINT_WEIGHTS = ("*.safetensors", "*.bin")


def _checkpoint_files(path: Path) -> list[Path]:
    for pattern in CHECKPOINT_WEIGHTS:
        files = sorted(path.glob(pattern))
        if files:
            return files
    raise EngineError(f"{path}: no weights (*.safetensors or *.bin) in the checkpoint folder; "
                      "give a Hugging Face or TensorRT-LLM checkpoint, or an engine directory")


def _engine_llm_class(trt: Any) -> Any:
    """1.x keeps the TensorRT-engine LLM in ``_tensorrt_engine`` (plain LLM is PyTorch);
    before 1.0, ``tensorrt_llm.LLM`` itself runs engines."""
    try:
        return importlib.import_module("tensorrt_llm._tensorrt_engine").LLM
    except (ImportError, AttributeError):
        return trt.LLM


class LlmApiEngine(EngineBase):
    """An engine directory or checkpoint driven through ``LLM.generate``."""

    def __init__(self, path: str | Path, *, options: EngineOptions | None = None) -> None:
        options = options or EngineOptions()
        self.path = Path(path)
        config = load_config_json(self.path, option="--engine")
        self.is_engine = "build_config" in config or "builder_config" in config
        if self.is_engine:
            config, limits = read_engine_config(self.path)
            files, engine_config, engine_version = engine_files(self.path), config, limits.version
        else:
            files, engine_config, engine_version = _checkpoint_files(self.path), None, None
        trt = require_tensorrt_llm("llmapi")
        version = str(getattr(trt, "__version__", "unknown"))
        self.sampling_params = getattr(trt, "SamplingParams", None)
        if self.sampling_params is None or "use_beam_search" not in inspect.signature(
                self.sampling_params).parameters:
            raise EngineError(f"the llmapi backend needs TensorRT-LLM 0.15 or later (SamplingParams "
                              f"with use_beam_search, n, best_of); this is {version}: upgrade, or "
                              "run the engine with --backend trtllm")
        self.llm_class = _engine_llm_class(trt) if self.is_engine else trt.LLM
        self.tokens = load_tokenizer(self.path, options, backend="llmapi")
        self.tokenizer = self.tokens.tokenizer
        self.trust_remote_code = options.trust_remote_code
        self._tqdm = "use_tqdm" in inspect.signature(self.llm_class.generate).parameters
        self.llm: Any = None
        self.llm_beam_width: int | None = None
        self._failed: dict[int, str] = {}
        self._load(None if self.is_engine else 1)  # load errors surface now, not in a cell
        self.info = EngineInfo(
            backend="llmapi", path=str(self.path), identity=weights_identity(files),
            config=engine_config,
            details={"model": "engine" if self.is_engine else "checkpoint",
                     "llm_class": f"{self.llm_class.__module__}.{self.llm_class.__qualname__}",
                     "tensorrt_llm": version, "engine_version": engine_version,
                     "tokenizer": str(self.tokens.folder), "end_id": self.tokens.end_id,
                     "pad_id": self.tokens.pad_id, "trust_remote_code": options.trust_remote_code,
                     "batch_position": "submission order within one LLM.generate call; the LLM "
                                       "API's scheduler decides the real batches"})

    def _load(self, beam_width: int | None) -> None:
        """(Re)build the LLM; for a checkpoint with ``max_beam_width=beam_width``."""
        self.close()
        kwargs: dict[str, Any] = {"model": str(self.path), "tokenizer": str(self.tokens.folder),
                                  "trust_remote_code": self.trust_remote_code}
        if beam_width is not None:
            kwargs["max_beam_width"] = beam_width
        self.llm = self.llm_class(**kwargs)
        self.llm_beam_width = beam_width

    def _llm_for(self, beam_width: int) -> Any:
        if self.is_engine:
            if self.llm is None:
                raise RuntimeError(f"{self.path}: the engine was closed")
            return self.llm
        if self.llm is None or self.llm_beam_width != beam_width:
            if beam_width in self._failed:
                raise RuntimeError(self._failed[beam_width])
            try:
                self._load(beam_width)
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0]
                self._failed[beam_width] = (f"loading {self.path} with max_beam_width {beam_width} "
                                            f"failed: {type(exc).__name__}: {first}")
                raise RuntimeError(self._failed[beam_width]) from None
        return self.llm

    def sampling(self, settings: DecodingSettings) -> Any:
        """The SamplingParams of one cell."""
        w = settings.beam_width
        kwargs: dict[str, Any] = {"max_tokens": settings.max_new_tokens,
                                  "end_id": self.tokens.end_id, "pad_id": self.tokens.pad_id}
        if w > 1:
            kwargs.update(use_beam_search=True, n=w, best_of=w,
                          length_penalty=settings.length_penalty,
                          early_stopping=1 if settings.early_stopping else 0)
        else:
            kwargs["top_k"] = 1  # greedy
        return self.sampling_params(**kwargs)

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(list(prompts))["input_ids"]]

    def close(self) -> None:
        llm, self.llm = self.llm, None
        shutdown = getattr(llm, "shutdown", None)
        if callable(shutdown):
            shutdown()

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        llm = self._llm_for(settings.beam_width)
        extra = {"use_tqdm": False} if self._tqdm else {}
        results = llm.generate(list(prompts), self.sampling(settings), **extra)
        if not isinstance(results, list) or len(results) != len(prompts):
            got = len(results) if isinstance(results, list) else type(results).__name__
            raise RuntimeError(f"LLM.generate returned {got} results for {len(prompts)} prompts")
        gens = []
        for result in results:
            outputs = sorted(result.outputs, key=lambda o: getattr(o, "index", 0))
            if not outputs:
                raise RuntimeError("LLM.generate returned a request without outputs")
            texts = tuple((o.text or "").strip() for o in outputs)
            gens.append(Generation(text=texts[0], token_ids=tuple(int(t) for t in outputs[0].token_ids),
                                   beams=texts))
        return gens
