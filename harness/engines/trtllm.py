"""The ``trtllm`` backend: a TensorRT-LLM engine directory run by ``tensorrt_llm.runtime``.

The C++ runner (``ModelRunnerCpp``) by default, the Python session (``ModelRunner``) with
``--trtllm-runtime python``; both are loaded with the engine's own build limits, so the
engine is tested as it was built. Calls follow trtllm-facts §2:

- one planned batch is one ``generate(batch_input_ids=[...])`` call, the prompts' token ids
  in position order (``prompts[i]`` is request ``i``);
- ``output_ids`` is ``[batch, beams, max_seq_len]`` with the prompt included and end_id
  padding; request ``i``, beam ``k`` is ``output_ids[i, k, input_len_i:sequence_lengths[i, k]]``;
- beam 0 is the scored output, every beam is kept in ``Generation.beams``;
- the runner's own refusals (``num_beams`` above the engine's ``max_beam_width``, a batch
  or prompt too large) propagate unchanged, so that cell fails with the runner's message
  and the rest of the run continues;
- a runner serves one beam width, since its decoder's mode and width are fixed when it is
  loaded (0.9 ``GptSession``) or by its first call (the Python session), and in-flight
  batching of ~0.10-0.13 refuses other widths (``trtllm_compat``): ``ModelRunnerCpp`` is
  loaded with ``max_beam_width=W`` per beam width, as TensorRT-LLM's ``examples/run.py`` does,
  and ``ModelRunner`` afresh; cells run in order of beam width, so each width loads once. A
  cell wider than the engine loads the engine's maximum, whose runner refuses it by name;
- the previous runner is shut down (the Executor, 0.10 on) and released before the next one
  loads, and no kept error holds it: one engine's weights and KV cache fill the GPU;
- KV-cache block reuse is asked for off (``kv_cache_enable_block_reuse=False`` where from_dir
  takes it) unless --kv-cache-reuse on: the rotation sends each prompt many times, and a
  prefill served from an earlier batch's blocks would hide a fault in prefill;
- an engine of the 0.5-0.8 builders is refused in one line (it does not deserialize under the
  TensorRT that 0.9 and later pin);
- the output's beam dimension may be the executor's maximum (to 0.13, unused beams empty) or
  the request's: only the first W are cut;
- ``close()`` closes the in-flight paths still open, shuts the runner's Executor down (0.10 on)
  and releases the runner.

The in-flight path (``in_flight``, the scheduled cells): where the C++ runner holds an Executor
(0.10 on), one ``Request`` per prompt enqueued on it and awaited by its id
(``harness.engines.trtllm_inflight``), on the runner the bulk cells load for the beam width and
with the sampling they pass (``sampling_keywords``); the answers are cut as the bulk path's
(``answer``). The runners that batch statically have none, and say why with their source
(``STATIC_ONLY``): 0.9's ``ModelRunnerCpp`` (a ``GptSession``) and the Python ``ModelRunner``.

``tensorrt_llm`` is imported when an engine is constructed, never when this module is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Protocol, TypeVar, runtime_checkable

from harness.config import DecodingSettings, EngineOptions, read_by
from harness.engines import trtllm_compat as compat
from harness.engines.base import EngineBase, Generation, InFlight, NoInFlight, said_count
from harness.engines.lazy import require
from harness.engines.protocols import Runner, RunnerClass, Tokenizer
from harness.engines.tokenizer import count_tokens, load_tokenizer
from harness.engines.trtllm_inflight import COUNTED, RequestMaker, TrtllmInFlight
from harness.errors import EngineError, describe
from harness.limits.engine_config import read_engine_config
from harness.model.engine import EngineInfo
from harness.model.vocab import Backend, Layout, TrtllmRuntime
from harness.storage.fingerprint import weights_identity

RUNNERS = {TrtllmRuntime.CPP: "ModelRunnerCpp", TrtllmRuntime.PYTHON: "ModelRunner"}
# why a runner without an Executor has no in-flight path: it batches statically, in its source
STATIC_ONLY = {
    "ModelRunnerCpp": "ModelRunnerCpp holds a GptSession, not an Executor, and batches statically: "
    "its generate hands the whole batch to GptSession.generate, which returns when every request of "
    "it is done, so no request joins a batch in flight (tensorrt_llm/runtime/model_runner_cpp.py, "
    "ModelRunnerCpp.__init__ l.75, from_dir l.173, generate l.238-355 at v0.9.0, 250d9c29); the "
    "Executor, and an in-flight path, come with 0.10",
    "ModelRunner": "the Python ModelRunner batches statically: its generate decodes the whole batch in "
    "one GenerationSession.decode call, returning when every request of it is done, so no request "
    "joins a batch in flight (tensorrt_llm/runtime/model_runner.py, ModelRunner.generate: "
    "self.session.decode l.686 at v0.9.0, 250d9c29; l.856 at 0.13.0.dev2024082000, 04c5298); the "
    "C++ runner (--trtllm-runtime cpp, 0.10 on) or --backend llmapi has one",
}
T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class ToList(Protocol[T_co]):
    """A tensor of the runner's output (or anything with ``tolist``): its values as lists."""

    def tolist(self) -> T_co: ...


def require_tensorrt_llm(backend: str) -> ModuleType:
    """The tensorrt_llm package, or one line naming the pip extra."""
    return require("tensorrt_llm", backend=backend, package="TensorRT-LLM", extra="trtllm")


def engine_files(path: Path) -> list[Path]:
    """The serialized per-rank engines (``rank0.engine``; legacy ``*_rank0.engine``)."""
    files = sorted(path.glob("*.engine"))
    if not files:
        raise EngineError(
            f"{path}: no *.engine files next to config.json; build the engine with "
            f"`trtllm-build --output_dir {path}`"
        )
    return files


def cut_generations(
    output_ids: ToList[Sequence[Sequence[Sequence[int]]]] | Sequence[Sequence[Sequence[int]]],
    sequence_lengths: ToList[Sequence[Sequence[int]]] | Sequence[Sequence[int]],
    input_lengths: Sequence[int],
    beams: int,
    end_id: int,
) -> list[list[list[int]]]:
    """Generated ids per request and beam: ``output_ids[i, k, input_len_i:sequence_lengths[i, k]]``,
    up to the first end_id; RuntimeError when the shapes are not ``[batch, beams, ...]``."""
    ids = output_ids.tolist() if isinstance(output_ids, ToList) else output_ids
    lengths = sequence_lengths.tolist() if isinstance(sequence_lengths, ToList) else sequence_lengths
    n = len(input_lengths)
    if (
        len(ids) != n
        or len(lengths) != n
        or any(len(row) < beams or len(lens) < beams for row, lens in zip(ids, lengths))
    ):
        shape = getattr(output_ids, "shape", None)
        raise RuntimeError(
            f"the runner returned output_ids of shape {tuple(shape) if shape is not None else '?'} "
            f"for {n} requests with {beams} beam(s); expected [{n}, {beams}, max_seq_len]"
        )
    out: list[list[list[int]]] = []
    for row, lens, start in zip(ids, lengths, input_lengths):
        entry = []
        for k in range(beams):
            seq = [int(t) for t in row[k][start : int(lens[k])]]
            if end_id in seq:
                seq = seq[: seq.index(end_id)]
            entry.append(seq)
        out.append(entry)
    return out


def sampling_keywords(settings: DecodingSettings) -> dict[str, object]:
    """A cell's sampling, as the keywords of the runners' ``generate``: ``num_beams``, greedy as
    ``top_k=1``, ``length_penalty`` and ``early_stopping`` (the in-flight path renames them as
    ``ModelRunnerCpp.generate`` does for the executor's SamplingConfig)."""
    beams = settings.beam_width
    keywords: dict[str, object] = {
        "num_beams": beams,
        "length_penalty": settings.length_penalty,
        "early_stopping": 1 if settings.early_stopping else 0,
    }
    if beams == 1:
        keywords["top_k"] = 1  # greedy
    return keywords


class TrtllmEngine(EngineBase):
    """A TensorRT-LLM engine directory (config.json and rank*.engine) on one GPU."""

    # an engine's dtype is fixed when it is built: --dtype is the hf backend's
    reads_options = read_by(Backend.TRTLLM)
    tokenizer: Tokenizer

    def __init__(self, path: str | Path, *, options: EngineOptions | None = None) -> None:
        options = options or EngineOptions()
        try:
            runtime_word = TrtllmRuntime(options.trtllm_runtime)
        except ValueError:
            raise EngineError(
                f"--trtllm-runtime {options.trtllm_runtime!r}: expected one of "
                f"{', '.join(w.value for w in TrtllmRuntime)}"
            ) from None
        self.path = Path(path)
        config, limits = read_engine_config(self.path)
        files = engine_files(self.path)
        trt = require_tensorrt_llm("trtllm")
        runtime = require("tensorrt_llm.runtime", backend="trtllm", package="TensorRT-LLM", extra="trtllm")
        self.version = str(getattr(trt, "__version__", "unknown"))
        if limits.layout == Layout.LEGACY:
            raise EngineError(compat.legacy_refusal(self.path, self.version))
        self.runner_name = RUNNERS[runtime_word]
        runner_cls: RunnerClass | None = getattr(runtime, self.runner_name, None)
        if runner_cls is None:
            other = TrtllmRuntime.PYTHON if runtime_word == TrtllmRuntime.CPP else TrtllmRuntime.CPP
            raise EngineError(
                f"TensorRT-LLM {self.version}: tensorrt_llm.runtime has no "
                f"{self.runner_name}; use --trtllm-runtime {other}"
            )
        self.runner_cls = runner_cls
        self.tokens = load_tokenizer(self.path, options, backend=Backend.TRTLLM)
        self.tokenizer = self.tokens.tokenizer
        mpi_rank = getattr(trt, "mpi_rank", None)
        self.rank = int(mpi_rank()) if callable(mpi_rank) else 0
        self.engine_max = limits.max_beam_width
        self.sizes_width = compat.takes_keyword(self.runner_cls.from_dir, "max_beam_width")
        self.reuse = compat.runner_reuse(
            self.runner_cls, self.runner_name, self.version, options.kv_cache_reuse
        )
        self.runner: Runner | None = None
        self.runner_width: int | None = None  # the beam width the runner serves (None: any)
        self.closed = False
        self.opened: list[InFlight] = []  # in-flight paths, closed with the engine
        self.failures = compat.LoadFailures()
        self._load_first()
        self.limits = limits
        self.info = EngineInfo(
            backend=Backend.TRTLLM,
            path=str(self.path),
            identity=weights_identity(files),
            details={
                "runtime": runtime_word.value,
                "runner": self.runner_name,
                "tensorrt_llm": self.version,
                "engine_version": limits.version,
                "rank": self.rank,
                "runner_per_beam_width": compat.PER_WIDTH[runtime_word],
                "tokenizer": str(self.tokens.folder),
                "end_id": self.tokens.end_id,
                "pad_id": self.tokens.pad_id,
                "trust_remote_code": options.trust_remote_code,
            },
            kv_cache_reuse=self.reuse.status,
        )

    def _from_dir(self, width: int | None) -> Runner:
        kwargs: dict[str, object] = {"engine_dir": str(self.path), "rank": self.rank, **self.reuse.kwargs}
        if width is not None and self.sizes_width:
            kwargs["max_beam_width"] = width
        return self.runner_cls.from_dir(**kwargs)

    def _load_first(self) -> None:
        """The runner for the first cells (greedy, in plan order), loaded now so that an engine
        that does not load stops the run before any cell."""
        width = self._target_width(1)
        try:
            self.runner = self._from_dir(width)
        except Exception as exc:
            raise EngineError(
                f"TensorRT-LLM {self.version}: {self.runner_name}.from_dir({self.path}) "
                f"failed: {describe(exc)}"
            ) from None
        self.runner_width = width

    def _target_width(self, beams: int) -> int | None:
        """The beam width a runner is loaded for: the cell's own, or None (the engine's maximum)
        for a cell the engine cannot run, so that the runner refuses it naming the limit."""
        if self.engine_max is not None and beams > self.engine_max:
            return None
        return beams

    def _runner_for(self, beams: int) -> Runner:
        """One runner serves one beam width: the decoder's mode and width are fixed when a
        runner is loaded (C++) or by its first call (Python), see trtllm_compat."""
        if self.closed:
            raise RuntimeError(f"{self.path}: the engine was closed")
        target = self._target_width(beams)
        if self.runner is None or target != self.runner_width:
            return self._reload(target)
        return self.runner

    def _release(self) -> None:
        """Free the runner before another loads: one engine's weights and KV cache (sized from
        the free memory at load) fill the GPU."""
        if self.runner is not None:
            slot: list[object] = [self.runner]
            self.runner = None
            compat.release(slot)

    def _reload(self, width: int | None) -> Runner:
        self.failures.check(width)
        self._release()
        self.runner_width = None
        try:
            self.runner = runner = self._from_dir(width)
        except Exception as exc:
            what = f"loading {self.path} with max_beam_width {width or self.engine_max}"
            raise self.failures.record(width, what, exc) from None
        self.runner_width = width
        return runner

    def _encode(self, prompts: Sequence[str]) -> list[list[int]]:
        return [list(ids) for ids in self.tokenizer(list(prompts))["input_ids"]]

    def encode_one(self, prompt: str) -> list[int]:
        """One prompt's token ids (an in-flight request's)."""
        return self._encode([prompt])[0]

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        return count_tokens(self.tokenizer, prompts)

    def close(self) -> None:
        self.closed = True
        while self.opened:
            self.opened.pop().close()
        self._release()

    def in_flight(self, settings: DecodingSettings) -> InFlight | NoInFlight:
        """The Executor's enqueue/await path (``harness.engines.trtllm_inflight``) on the runner
        this setting's bulk cells use; NoInFlight, with the source's reason, for a runner that
        batches statically (0.9's ``ModelRunnerCpp``, the Python ``ModelRunner``)."""
        static = f"TensorRT-LLM {self.version}: {STATIC_ONLY[self.runner_name]}"
        if self.runner_name != RUNNERS[TrtllmRuntime.CPP]:
            return NoInFlight(static)
        if self.runner is not None and compat.executor_of(self.runner) is None:
            return NoInFlight(static)  # this release's ModelRunnerCpp holds none: no reload to learn it
        runner = self._runner_for(settings.beam_width)
        executor = compat.executor_of(runner)
        if executor is None:
            return NoInFlight(static)
        if not executor.can_enqueue_requests():
            return NoInFlight(
                f"TensorRT-LLM {self.version}: rank {self.rank} cannot enqueue requests on the Executor "
                "(only its leader, rank 0, can)"
            )
        bindings = require(
            "tensorrt_llm.bindings.executor", backend="trtllm", package="TensorRT-LLM", extra="trtllm"
        )
        make = RequestMaker.of(
            bindings,
            sampling_keywords(settings),
            settings.max_new_tokens,
            self.tokens.end_id,
            self.tokens.pad_id,
        )
        path = TrtllmInFlight(
            self,
            runner,
            executor,
            make,
            settings.beam_width,
            slots=said_count(getattr(runner, "max_batch_size", None)),
            cache=compat.cache_sentence(self.reuse.status, COUNTED),
            where=str(self.path),
        )
        self.opened.append(path)
        return path

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        ids = self._encode(prompts)
        beams = settings.beam_width
        try:
            out = self._call(self._runner_for(beams), ids, settings)
        except Exception as exc:
            # without the traceback, whose frames hold the runner: a kept error must not keep
            # an engine's GPU memory from the next load
            raise exc.with_traceback(None) from None
        if self.rank != 0 and not out:
            # ModelRunnerCpp returns outputs on the leader rank only; the others took part
            # in the same call and have nothing to score (harness.pipeline.follow ignores it)
            return [Generation(text="", token_ids=(), beams=("",)) for _ in prompts]
        if not isinstance(out, dict) or "output_ids" not in out or "sequence_lengths" not in out:
            raise RuntimeError(
                "the runner returned no output_ids/sequence_lengths (return_dict=True, "
                "output_sequence_lengths=True were asked for)"
            )
        cut = cut_generations(
            out["output_ids"].cpu(),
            out["sequence_lengths"].cpu(),
            [len(x) for x in ids],
            beams,
            self.tokens.end_id,
        )
        return [self._generation(entry) for entry in cut]

    def _call(self, runner: Runner, ids: list[list[int]], settings: DecodingSettings) -> object:
        """One ``generate`` call: the prompts in position order, sampling as keywords."""
        import torch

        with torch.no_grad():
            return runner.generate(
                batch_input_ids=[torch.tensor(x, dtype=torch.int32) for x in ids],
                max_new_tokens=settings.max_new_tokens,
                end_id=self.tokens.end_id,
                pad_id=self.tokens.pad_id,
                output_sequence_lengths=True,
                return_dict=True,
                **sampling_keywords(settings),
            )

    def answer(self, prompt_len: int, beams: Sequence[Sequence[int]], width: int) -> Generation:
        """One in-flight request's final beams (its prompt included, as the executor returns them),
        cut and read as a bulk output is: beam 0 scored, the first ``width`` kept."""
        [entry] = cut_generations([beams], [[len(b) for b in beams]], [prompt_len], width, self.tokens.end_id)
        return self._generation(entry)

    def _generation(self, entry: list[list[int]]) -> Generation:
        vocab = len(self.tokenizer)
        # ids outside the vocabulary (e.g. -1 from a faulty kernel) are dropped from the text and
        # kept in token_ids, so a damaged position scores low instead of failing the whole cell
        texts = tuple(
            self.tokenizer.decode([t for t in beam if 0 <= t < vocab], skip_special_tokens=True).strip()
            for beam in entry
        )
        return Generation(text=texts[0], token_ids=tuple(entry[0]), beams=texts)
