"""The ``hf`` backend: a transformers causal LM directory, the reference for goldens.

Batches are left-padded with an attention mask, as transformers expects for decoder-only
generation; ``prompts[i]`` is row ``i`` of the batch. Weights load through safetensors
only, and never with remote code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, cast, overload

from harness.config import DecodingSettings, EngineOptions, read_by
from harness.engines.base import EngineBase, Generation, InFlight, NoInFlight
from harness.engines.protocols import Tokenizer
from harness.engines.tokenizer import count_tokens
from harness.errors import EngineError, first_line
from harness.model.engine import EngineInfo, KvCacheReuse
from harness.model.vocab import Backend, CacheReuse, Dtype
from harness.storage.fingerprint import weights_identity

if TYPE_CHECKING:
    import torch

# measured with transformers 5.25 (the bundled model, 4 prompts): asked for num_beams=4 the
# manager returned model.generate's greedy outputs for all 4, 2 of which beam 4 changes
NO_BEAMS = (
    "transformers' continuous batching decodes greedy only; asked for num_beams={beam} it returns the "
    "greedy outputs without a word, which are not beam {beam}'s"
)


class TensorBatch(Protocol):
    """A batch the tokenizer encoded as tensors (transformers' ``BatchEncoding``)."""

    def to(self, device: str) -> TensorBatch: ...

    def keys(self) -> Iterable[str]: ...

    def __getitem__(self, key: str, /) -> torch.Tensor: ...


class HfTokenizer(Tokenizer, Protocol):
    """The tokenizer as this backend also uses it: left padding, and tensors for the model."""

    padding_side: str
    pad_token: str | None
    eos_token: str | None
    all_special_ids: list[int]

    @overload
    def __call__(self, text: list[str], /) -> Mapping[str, list[list[int]]]: ...

    @overload
    def __call__(
        self, text: list[str], /, *, return_tensors: Literal["pt"], padding: bool
    ) -> TensorBatch: ...


class CausalLM(Protocol):
    """A transformers causal LM: ``generate`` returns the token ids, prompt included."""

    def to(self, *, device: str, dtype: torch.dtype) -> CausalLM: ...

    eval: Callable[[], object]  # inference mode (dropout off)

    def generate(self, **kwargs: object) -> torch.Tensor: ...


class HFEngine(EngineBase):
    """Greedy and beam-search generation with ``model.generate``, in --dtype (float32 by
    default: a GPU serves bfloat16 or float16, and its outputs drift with the batch shape)."""

    reads_options = read_by(Backend.HF)
    tokenizer: HfTokenizer

    def __init__(
        self, path: str | Path, *, device: str | None = None, options: EngineOptions | None = None
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.dtype = Dtype((options or EngineOptions()).dtype)
        self.path = Path(path)
        weights = sorted(self.path.glob("*.safetensors"))
        if not weights:
            raise EngineError(
                f"{self.path}: no *.safetensors weights; the hf backend loads "
                "safetensors only (convert with `save_pretrained(safe_serialization=True)`)"
            )
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(self.path), trust_remote_code=False)
            model = AutoModelForCausalLM.from_pretrained(
                str(self.path), trust_remote_code=False, use_safetensors=True
            )
            # transformers annotates decode for batches too (str | list[str]) and generate's
            # answer as a union with its dict form; this backend asks for neither
            self.tokenizer = cast(HfTokenizer, tokenizer)
            self.model = cast(CausalLM, model).to(device=self.device, dtype=getattr(torch, self.dtype.value))
        except (OSError, ValueError) as exc:
            raise EngineError(
                f"{self.path}: cannot load as a transformers model ({first_line(exc) or type(exc).__name__})"
            ) from None
        self.model.eval()
        self.opened: list[InFlight] = []  # in-flight paths close() stops (their loops are not daemons)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        # goldens are kept per dtype: outputs in bfloat16 are not float32's
        identity = weights_identity(weights)
        self.info = EngineInfo(
            backend=Backend.HF,
            path=str(self.path),
            identity=identity if self.dtype == Dtype.FLOAT32 else f"{self.dtype}:{identity}",
            details={"device": self.device, "dtype": self.dtype.value},
            kv_cache_reuse=KvCacheReuse(
                CacheReuse.OFF,
                "transformers generate() computes every call's prefill; it keeps no KV cache between calls",
            ),
        )

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        return count_tokens(self.tokenizer, prompts)

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        import torch

        enc = self.tokenizer(list(prompts), return_tensors="pt", padding=True).to(self.device)
        beam = settings.beam_width
        with torch.inference_mode():
            out = self.model.generate(
                **enc,
                max_new_tokens=settings.max_new_tokens,
                do_sample=False,
                num_beams=beam,
                num_return_sequences=beam,
                length_penalty=settings.length_penalty,
                early_stopping=settings.early_stopping if beam > 1 else False,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
            )
        new = out[:, enc["input_ids"].shape[1] :].view(len(prompts), beam, -1).tolist()
        special = set(self.tokenizer.all_special_ids)
        results = []
        for entry in new:
            beams = []
            for ids in entry:
                cut = [t for t in ids if t not in special]
                beams.append(cut)
            texts = tuple(self.tokenizer.decode(b, skip_special_tokens=True).strip() for b in beams)
            results.append(Generation(text=texts[0], token_ids=tuple(beams[0]), beams=texts))
        return results

    def in_flight(self, settings: DecodingSettings) -> InFlight | NoInFlight:
        """transformers' continuous batching over this model, greedy (``harness.engines.hf_inflight``)."""
        if settings.beam_width > 1:
            return NoInFlight(NO_BEAMS.format(beam=settings.beam_width))
        if not callable(getattr(self.model, "init_continuous_batching", None)):
            return NoInFlight(
                "this transformers release has no continuous batching (init_continuous_batching)"
            )
        from harness.engines.hf_inflight import ContinuousBatching, HfInFlight

        path = HfInFlight(
            cast(ContinuousBatching, self.model),
            self.tokenizer,
            settings,
            generation_config=getattr(self.model, "generation_config", None),
            on_cpu=self.device == "cpu",
        )
        self.opened.append(path)
        return path

    def close(self) -> None:
        """Stop every in-flight path still open (closing one twice does nothing)."""
        while self.opened:
            self.opened.pop().close()
