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
fails that cell. A checkpoint gets an LLM per beam width W, the previous one shut down first:
1.x's PyTorch backend requires every request's beam width to equal ``max_beam_width``, so it
is built with ``max_beam_width=W`` and, for beam search, ``disable_overlap_scheduler=True`` and
``cuda_graph_config=None`` (1.0 docs; a release that has no such field names it and it is
dropped); 0.15/0.16 ``LlmArgs`` has no ``max_beam_width`` (TypeError), so there the engine is
built with ``build_config=BuildConfig(max_beam_width=W)``. Beam parameters follow the line's
``SamplingParams``: OpenAI style (``use_beam_search, n, best_of``), or ``beam_width=W`` where it
also has Hugging Face style fields (0.15/0.16-era), whose ``_check_arguments`` reads
``beam_width``. ``close()`` calls ``shutdown()``, or ``_shutdown()`` (0.15/0.16), and releases
the LLM, as every reload does before the next LLM loads. Every LLM gets
``kv_cache_config=KvCacheConfig(enable_block_reuse=...)`` (off unless --kv-cache-reuse on):
1.x turns block reuse on by default, which would serve the rotation's repeated prompts their
prefill from earlier batches.
The in-flight path (``in_flight``, ``harness.engines.llmapi_inflight``) sends one
``LLM.generate_async`` per request on the same LLM and SamplingParams, its answers read by
``request_generation`` as the bulk path reads them.
``tensorrt_llm`` is imported when an engine is constructed, never when this module is.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from harness.config import DecodingSettings, EngineOptions, read_by
from harness.engines import trtllm_compat as compat
from harness.engines.base import EngineBase, Generation, InFlight, NoInFlight
from harness.engines.llmapi_inflight import COUNTED, LlmApiInFlight, request_generation
from harness.engines.protocols import Llm, LlmClass, Tokenizer
from harness.engines.tokenizer import count_tokens, load_tokenizer
from harness.engines.trtllm import engine_files, require_tensorrt_llm
from harness.errors import EngineError
from harness.limits.engine_config import load_config_json, read_engine_config
from harness.model.engine import EngineInfo
from harness.model.vocab import Backend
from harness.storage.fingerprint import weights_identity

CHECKPOINT_WEIGHTS = ("*.safetensors", "*.bin")
BEAM_SEARCH_ARGS = {"disable_overlap_scheduler": True, "cuda_graph_config": None}  # 1.0 PyTorch backend


def _checkpoint_files(path: Path) -> list[Path]:
    for pattern in CHECKPOINT_WEIGHTS:
        files = sorted(path.glob(pattern))
        if files:
            return files
    raise EngineError(
        f"{path}: no weights (*.safetensors or *.bin) in the checkpoint folder; "
        "give a Hugging Face or TensorRT-LLM checkpoint, or an engine directory"
    )


def _engine_llm_class(trt: ModuleType) -> LlmClass:
    """1.x keeps the TensorRT-engine LLM in ``_tensorrt_engine`` (plain LLM is PyTorch);
    before 1.0, ``tensorrt_llm.LLM`` itself runs engines."""
    llm_class: LlmClass
    try:
        llm_class = importlib.import_module("tensorrt_llm._tensorrt_engine").LLM
    except (ImportError, AttributeError):
        llm_class = trt.LLM
    return llm_class


def _hf_style_beams(sampling_params: Callable[..., object]) -> bool:
    """Whether SamplingParams also takes Hugging Face style ``beam_width``/``num_return_sequences``
    (the 0.15/0.16-era class, whose ``LLM._check_arguments`` compares ``beam_width``)."""
    params = inspect.signature(sampling_params).parameters
    return "beam_width" in params and "num_return_sequences" in params


class LlmApiEngine(EngineBase):
    """An engine directory or checkpoint driven through ``LLM.generate``."""

    # what it reads of the load options: no --trtllm-runtime (the LLM API picks its own)
    reads_options = read_by(Backend.LLMAPI)
    tokenizer: Tokenizer

    def __init__(self, path: str | Path, *, options: EngineOptions | None = None) -> None:
        options = options or EngineOptions()
        self.path = Path(path)
        config = load_config_json(self.path, option="--engine")
        self.is_engine = "build_config" in config or "builder_config" in config
        if self.is_engine:
            config, limits = read_engine_config(self.path)
            files, self.limits, engine_version = engine_files(self.path), limits, limits.version
        else:
            files, self.limits, engine_version = _checkpoint_files(self.path), None, None
        trt = require_tensorrt_llm("llmapi")
        version = str(getattr(trt, "__version__", "unknown"))
        sampling_params: Callable[..., object] | None = getattr(trt, "SamplingParams", None)
        if sampling_params is None or "use_beam_search" not in inspect.signature(sampling_params).parameters:
            raise EngineError(
                f"the llmapi backend needs TensorRT-LLM 0.15 or later (SamplingParams "
                f"with use_beam_search, n, best_of); this is {version}: upgrade, or "
                "run the engine with --backend trtllm"
            )
        self.sampling_params = sampling_params
        self.trt = trt
        self.hf_style = _hf_style_beams(self.sampling_params)
        self.llm_class: LlmClass = _engine_llm_class(trt) if self.is_engine else trt.LLM
        self.tokens = load_tokenizer(self.path, options, backend=Backend.LLMAPI)
        self.tokenizer = self.tokens.tokenizer
        self.trust_remote_code = options.trust_remote_code
        self.reuse = compat.llm_reuse(version, options.kv_cache_reuse)
        self._tqdm = "use_tqdm" in inspect.signature(self.llm_class.generate).parameters
        self.llm: Llm | None = None
        self.llm_beam_width: int | None = None
        self.closed = False
        self.version = version
        self.opened: list[InFlight] = []  # in-flight paths, closed with the engine
        self.failures = compat.LoadFailures()
        self._load(None if self.is_engine else 1)  # load errors surface now, not in a cell
        self.info = EngineInfo(
            backend=Backend.LLMAPI,
            path=str(self.path),
            identity=weights_identity(files),
            details={
                "model": "engine" if self.is_engine else "checkpoint",
                "llm_class": f"{self.llm_class.__module__}.{self.llm_class.__qualname__}",
                "tensorrt_llm": version,
                "engine_version": engine_version,
                "tokenizer": str(self.tokens.folder),
                "end_id": self.tokens.end_id,
                "pad_id": self.tokens.pad_id,
                "trust_remote_code": options.trust_remote_code,
                "batch_position": "submission order within one LLM.generate call; the LLM "
                "API's scheduler decides the real batches",
            },
            kv_cache_reuse=self.reuse.status,
        )

    def _load(self, beam_width: int | None) -> Llm:
        """(Re)build the LLM; for a checkpoint with a maximum beam width of ``beam_width``."""
        self._release()
        base: dict[str, object] = {
            "model": str(self.path),
            "tokenizer": str(self.tokens.folder),
            "trust_remote_code": self.trust_remote_code,
            **self.reuse.kwargs,
        }
        self.llm = llm = self.llm_class(**base) if beam_width is None else self._construct(base, beam_width)
        self.llm_beam_width = beam_width
        return llm

    def _construct(self, base: dict[str, object], width: int) -> Llm:
        """An LLM with ``max_beam_width=width`` (and the beam-search settings), dropping a
        setting the release names as unknown, or ``build_config`` where it has no such field."""
        extra: dict[str, object] = {"max_beam_width": width, **(BEAM_SEARCH_ARGS if width > 1 else {})}
        for _ in range(len(extra) + 1):
            try:
                return self.llm_class(**base, **extra)
            except Exception as exc:
                key = compat.rejected_keyword(exc, extra)
                build_config: Callable[..., object] | None = getattr(self.trt, "BuildConfig", None)
                if key == "max_beam_width" and build_config is not None:
                    # 0.15/0.16: the limit is the engine build's
                    extra = {"build_config": build_config(max_beam_width=width)}
                elif key is None or key == "max_beam_width":
                    raise
                else:
                    extra.pop(key)
        raise RuntimeError(f"the LLM refused every way of setting max_beam_width {width}")

    def _llm_for(self, beam_width: int) -> Llm:
        if self.closed or (self.is_engine and self.llm is None):
            raise RuntimeError(f"{self.path}: the engine was closed")
        if self.llm is not None and (self.is_engine or self.llm_beam_width == beam_width):
            return self.llm
        self.failures.check(beam_width)
        try:
            return self._load(beam_width)
        except Exception as exc:
            what = f"loading {self.path} with max_beam_width {beam_width}"
            raise self.failures.record(beam_width, what, exc) from None

    def sampling(self, settings: DecodingSettings) -> object:
        """The SamplingParams of one cell."""
        w = settings.beam_width
        kwargs: dict[str, object] = {
            "max_tokens": settings.max_new_tokens,
            "end_id": self.tokens.end_id,
            "pad_id": self.tokens.pad_id,
        }
        if w > 1:
            beams = {"beam_width": w} if self.hf_style else {"use_beam_search": True, "n": w, "best_of": w}
            kwargs.update(
                beams,
                length_penalty=settings.length_penalty,
                early_stopping=1 if settings.early_stopping else 0,
            )
        else:
            kwargs["top_k"] = 1  # greedy
        return self.sampling_params(**kwargs)

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        return count_tokens(self.tokenizer, prompts)

    def _release(self) -> None:
        """Shut the LLM down (``shutdown()``, or ``_shutdown()`` on 0.15/0.16) and drop it before
        another loads: one engine fills the GPU."""
        if self.llm is not None:
            slot: list[object] = [self.llm]
            self.llm = None
            compat.release(slot)

    def close(self) -> None:
        self.closed = True
        while self.opened:
            self.opened.pop().close()
        self._release()

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        llm = self._llm_for(settings.beam_width)
        extra = {"use_tqdm": False} if self._tqdm else {}
        results = llm.generate(list(prompts), self.sampling(settings), **extra)
        if not isinstance(results, list) or len(results) != len(prompts):
            got = len(results) if isinstance(results, list) else type(results).__name__
            raise RuntimeError(f"LLM.generate returned {got} results for {len(prompts)} prompts")
        return [request_generation(result) for result in results]

    def in_flight(self, settings: DecodingSettings) -> InFlight | NoInFlight:
        """``LLM.generate_async`` per request on the LLM and SamplingParams this setting's bulk
        cells use (``harness.engines.llmapi_inflight``); NoInFlight where the release's LLM has
        no generate_async."""
        llm = self._llm_for(settings.beam_width)
        if not callable(getattr(llm, "generate_async", None)):
            return NoInFlight(
                f"TensorRT-LLM {self.version}'s LLM ({self.info.details['llm_class']}) has no "
                "generate_async, the LLM API's one-request entry point"
            )
        path = LlmApiInFlight(
            llm,
            self.sampling(settings),
            compat.cache_sentence(self.reuse.status, COUNTED),
            lambda: self.llm,
            str(self.path),
        )
        self.opened.append(path)
        return path
