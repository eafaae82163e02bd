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
  and the rest of the run continues.

``tensorrt_llm`` is imported when an engine is constructed, never when this module is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.config import TRTLLM_RUNTIMES, DecodingSettings, EngineOptions
from harness.engines.base import EngineBase, EngineInfo, Generation
from harness.engines.lazy import require
from harness.engines.tokenizer import load_tokenizer
from harness.errors import EngineError
from harness.limits.engine_config import read_engine_config
from harness.storage.fingerprint import weights_identity

RUNNERS = {"cpp": "ModelRunnerCpp", "python": "ModelRunner"}


def require_tensorrt_llm(backend: str) -> Any:
    """The tensorrt_llm package, or one line naming the pip extra."""
    return require("tensorrt_llm", backend=backend, package="TensorRT-LLM", extra="trtllm")


def engine_files(path: Path) -> list[Path]:
    """The serialized per-rank engines (``rank0.engine``; legacy ``*_rank0.engine``)."""
    files = sorted(path.glob("*.engine"))
    if not files:
        raise EngineError(f"{path}: no *.engine files next to config.json; build the engine with "
                          f"`trtllm-build --output_dir {path}`")
    return files


def cut_generations(output_ids: Any, sequence_lengths: Any, input_lengths: Sequence[int],
                    beams: int, end_id: int) -> list[list[list[int]]]:
    """Generated ids per request and beam: ``output_ids[i, k, input_len_i:sequence_lengths[i, k]]``,
    up to the first end_id; RuntimeError when the shapes are not ``[batch, beams, ...]``."""
    ids = output_ids.tolist() if hasattr(output_ids, "tolist") else output_ids
    lengths = sequence_lengths.tolist() if hasattr(sequence_lengths, "tolist") else sequence_lengths
    n = len(input_lengths)
    if (len(ids) != n or len(lengths) != n
            or any(len(row) < beams or len(lens) < beams for row, lens in zip(ids, lengths))):
        shape = getattr(output_ids, "shape", None)
        raise RuntimeError(f"the runner returned output_ids of shape {tuple(shape) if shape is not None else '?'} "
                           f"for {n} requests with {beams} beam(s); expected [{n}, {beams}, max_seq_len]")
    out: list[list[list[int]]] = []
    for row, lens, start in zip(ids, lengths, input_lengths):
        entry = []
        for k in range(beams):
            seq = [int(t) for t in row[k][start:int(lens[k])]]
            if end_id in seq:
                seq = seq[:seq.index(end_id)]
            entry.append(seq)
        out.append(entry)
    return out


class TrtllmEngine(EngineBase):
    """A TensorRT-LLM engine directory (config.json and rank*.engine) on one GPU."""

    def __init__(self, path: str | Path, *, options: EngineOptions | None = None) -> None:
        options = options or EngineOptions()
        if options.trtllm_runtime not in TRTLLM_RUNTIMES:
            raise EngineError(f"--trtllm-runtime {options.trtllm_runtime!r}: expected one of "
                              f"{', '.join(TRTLLM_RUNTIMES)}")
        self.path = Path(path)
        config, limits = read_engine_config(self.path)
        files = engine_files(self.path)
        trt = require_tensorrt_llm("trtllm")
        runtime = require("tensorrt_llm.runtime", backend="trtllm", package="TensorRT-LLM",
                          extra="trtllm")
        version = str(getattr(trt, "__version__", "unknown"))
        runner_name = RUNNERS[options.trtllm_runtime]
        runner_cls = getattr(runtime, runner_name, None)
        if runner_cls is None:
            other = "python" if options.trtllm_runtime == "cpp" else "cpp"
            raise EngineError(f"TensorRT-LLM {version}: tensorrt_llm.runtime has no {runner_name}; "
                              f"use --trtllm-runtime {other}")
        self.tokens = load_tokenizer(self.path, options, backend="trtllm")
        self.tokenizer = self.tokens.tokenizer
        mpi_rank = getattr(trt, "mpi_rank", None)
        rank = int(mpi_rank()) if callable(mpi_rank) else 0
        self.rank = rank
        self.runner: Any = runner_cls.from_dir(engine_dir=str(self.path), rank=rank)
        self.info = EngineInfo(
            backend="trtllm", path=str(self.path), identity=weights_identity(files), config=config,
            details={"runtime": options.trtllm_runtime, "runner": runner_name, "tensorrt_llm": version,
                     "engine_version": limits.version, "rank": rank,
                     "tokenizer": str(self.tokens.folder), "end_id": self.tokens.end_id,
                     "pad_id": self.tokens.pad_id, "trust_remote_code": options.trust_remote_code})

    def _encode(self, prompts: Sequence[str]) -> list[list[int]]:
        return [list(ids) for ids in self.tokenizer(list(prompts))["input_ids"]]

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in self._encode(prompts)]

    def close(self) -> None:
        self.runner = None  # the runner frees its engine and KV cache when released

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        import torch

        if self.runner is None:
            raise RuntimeError(f"{self.path}: the engine was closed")
        ids = self._encode(prompts)
        beams = settings.beam_width
        sampling: dict[str, Any] = {"num_beams": beams, "length_penalty": settings.length_penalty,
                                    "early_stopping": 1 if settings.early_stopping else 0}
        if beams == 1:
            sampling["top_k"] = 1  # greedy
        with torch.no_grad():
            out = self.runner.generate(
                batch_input_ids=[torch.tensor(x, dtype=torch.int32) for x in ids],
                max_new_tokens=settings.max_new_tokens, end_id=self.tokens.end_id,
                pad_id=self.tokens.pad_id, output_sequence_lengths=True, return_dict=True,
                **sampling)
        if self.rank != 0 and not out:
            # ModelRunnerCpp returns outputs on the leader rank only; the others took part
            # in the same call and have nothing to score (harness.pipeline.follow ignores it)
            return [Generation(text="", token_ids=(), beams=("",)) for _ in prompts]
        if not isinstance(out, dict) or "output_ids" not in out or "sequence_lengths" not in out:
            raise RuntimeError("the runner returned no output_ids/sequence_lengths (return_dict=True, "
                               "output_sequence_lengths=True were asked for)")
        cut = cut_generations(out["output_ids"].cpu(), out["sequence_lengths"].cpu(),
                              [len(x) for x in ids], beams, self.tokens.end_id)
        return [self._generation(entry) for entry in cut]

    def _generation(self, entry: list[list[int]]) -> Generation:
        vocab = len(self.tokenizer)
        # ids outside the vocabulary (e.g. -1 from a faulty kernel) are dropped from the text and
        # kept in token_ids, so a damaged position scores low instead of failing the whole cell
        texts = tuple(self.tokenizer.decode([t for t in beam if 0 <= t < vocab],
                                            skip_special_tokens=True).strip() for beam in entry)
        return Generation(text=texts[0], token_ids=tuple(entry[0]), beams=texts)
