"""The emulator engine: batched greedy and beam-search decoding over a slot KV cache.

Like a TensorRT-LLM engine it is bound by the limits it was built with (config.json's
``build_config``) and allocates its KV cache once, at load. Like the engine of the
incident it does *not* refuse ``num_beams > max_beam_width`` or a batch larger than
``max_batch_size``: the extra beam slots simply do not exist (see ``model.py``). It does
refuse a prompt plus ``max_new_tokens`` longer than ``max_seq_len``, as TensorRT-LLM does.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.config import DecodingSettings, EngineOptions
from harness.engines.base import EngineBase, Generation, InFlight, NoInFlight
from harness.engines.emulator import DEFAULT_PREFILL_CHUNK
from harness.engines.emulator.drift import Drift, Trace, drift_from_config, plan_flips
from harness.engines.emulator.faults import Fault, fault_from_config
from harness.engines.emulator.model import MistralEmulator, ModelShape, PrefillCache, allocate_cache
from harness.engines.emulator.search import Beams, greedy_ties
from harness.engines.protocols import Tokenizer
from harness.engines.tokenizer import auto_tokenizer, count_tokens
from harness.errors import EngineError, first_line
from harness.limits.engine_config import ConfigSection, parse_config_text, read_limits
from harness.model.engine import EngineInfo, KvCacheReuse
from harness.model.vocab import Backend, CacheReuse
from harness.storage.fingerprint import weights_identity

WEIGHTS_FILE = "rank0.safetensors"
TOKENIZER_DIR = "tokenizer"
COMPUTE_DTYPES = {"float64": torch.float64, "float32": torch.float32}


@functools.cache
def code_digest() -> str:
    """sha256 over the emulator's own source (this package): its code decides its outputs
    the way a real engine's build does, so a change to it must not reuse cached outputs."""
    h = hashlib.sha256()
    for file in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(f"{file.name}\n".encode() + file.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class _Pass:
    """What one decoding pass applies: the fault's effects on this batch and drift's flips.

    ``margin`` None: near-ties are not looked for (an engine without drift)."""

    limit: int  # tokens to generate at most (truncate lowers it at batch size > 1)
    padding: bool = False
    stride: bool = False
    flips: Mapping[int, int] = field(default_factory=dict)  # entry -> earliest flip step
    margin: float | None = None
    # beam search: a flipping entry's batch-size-1 output, which its flip must not leave as is
    unflipped: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


class EmulatorEngine(EngineBase):
    """An engine directory written by ``python -m harness build-engine``."""

    tokenizer: Tokenizer

    def __init__(self, path: str | Path) -> None:
        from safetensors.torch import load_file

        self.path = Path(path)
        file = self.path / "config.json"
        config = parse_config_text(file)
        self.config = config
        root = ConfigSection(config, str(file), "")
        pre = root.required_section("pretrained_config")
        build = root.required_section("build_config")
        emu = root.required_section("emulator")
        need = pre.required_integer
        self.shape = ModelShape(
            vocab_size=need("vocab_size"),
            hidden_size=need("hidden_size"),
            intermediate_size=need("intermediate_size"),
            num_layers=need("num_hidden_layers"),
            num_heads=need("num_attention_heads"),
            num_kv_heads=need("num_key_value_heads"),
            head_size=need("head_size"),
            rope_theta=pre.required_number("rope_theta"),
            rms_norm_eps=pre.required_number("rms_norm_eps"),
        )
        self.max_batch_size = build.required_integer("max_batch_size")
        self.max_beam_width = build.required_integer("max_beam_width")
        self.max_input_len = build.required_integer("max_input_len")
        self.max_seq_len = build.required_integer("max_seq_len")
        dtype_name = emu.text("compute_dtype")
        if dtype_name not in COMPUTE_DTYPES:
            raise EngineError(
                f"{file}: emulator.compute_dtype {dtype_name!r} is not one of {', '.join(COMPUTE_DTYPES)}"
            )
        dtype = COMPUTE_DTYPES[dtype_name]
        self.fault: Fault | None = fault_from_config(emu.data.get("fault"), str(file))
        self.drift: Drift | None = drift_from_config(emu.data.get("drift"), str(file))
        self._traces: dict[tuple[str, DecodingSettings], Trace] = {}  # drift: bs1 outputs
        chunk = emu.data.get("prefill_chunk", DEFAULT_PREFILL_CHUNK)  # absent: an older build
        if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
            raise EngineError(f"{file}: emulator.prefill_chunk {chunk!r} must be a positive integer")
        self.prefill_chunk = chunk
        # one decoding at a time: an in-flight session's steps and bulk generate share the
        # model, the prompt-phase cache and the drift traces
        self.busy = threading.RLock()

        weights_file = self.path / WEIGHTS_FILE
        if not weights_file.is_file():
            raise EngineError(
                f"{weights_file}: engine weights missing; rebuild the engine with "
                "`python -m harness build-engine`"
            )
        self.tokenizer, self.eos_id = _load_tokenizer(self.path / TOKENIZER_DIR, self.shape.vocab_size)
        try:
            weights = load_file(str(weights_file))
        except Exception as exc:  # safetensors raises its own error types
            raise EngineError(
                f"{weights_file}: cannot read weights ({exc}); rebuild the engine with "
                "`python -m harness build-engine`"
            ) from None
        try:
            self.model = MistralEmulator(self.shape, weights, dtype)
        except KeyError as exc:
            raise EngineError(
                f"{weights_file}: tensor {exc} missing; the weights do not match a Mistral model"
            ) from None
        self.prefills = PrefillCache(self.model)  # prompt phases, reused across batches
        # Allocated once, for max_batch_size x max_beam_width beam slots, as at engine build.
        self.cache = allocate_cache(
            self.shape, self.max_batch_size * self.max_beam_width, self.max_seq_len, dtype, file
        )
        self.limits = read_limits(config, str(file))
        self.info = EngineInfo(
            backend=Backend.EMULATOR,
            path=str(self.path),
            identity=weights_identity([weights_file]),
            details={
                "compute_dtype": dtype_name,
                "kv_cache_slots": self.cache.slots,
                "emulator_code": code_digest(),
            },
            kv_cache_reuse=KvCacheReuse(
                CacheReuse.OFF,
                "the emulator writes every batch's prompts "
                "into its KV-cache slots itself; nothing is kept between calls",
            ),
        )

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        return count_tokens(self.tokenizer, prompts)

    def in_flight(self, settings: DecodingSettings) -> InFlight | NoInFlight:
        """The emulator's in-flight scheduler (inflight.py), greedy decoding only."""
        if settings.beam_width > 1:
            return NoInFlight(
                f"the emulator's in-flight scheduler decodes greedy only (beam width {settings.beam_width})"
            )
        from harness.engines.emulator.inflight import EmulatorInFlight

        return EmulatorInFlight(self, settings)

    def refusal(self, length: int, max_new_tokens: int) -> str | None:
        """Why a prompt of ``length`` tokens is refused, as TensorRT-LLM refuses it (None: it fits);
        the bulk batches and the in-flight path alike."""
        if length > self.max_input_len:
            return f"input length {length} exceeds the engine's max_input_len {self.max_input_len}"
        if length + max_new_tokens > self.max_seq_len:
            return (
                f"input length {length} + max_new_tokens {max_new_tokens} "
                f"exceeds the engine's max_seq_len {self.max_seq_len}"
            )
        return None

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        with self.busy:
            return self._generate(prompts, settings)

    @torch.inference_mode()
    def _generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        ids = self.tokenizer(list(prompts))["input_ids"]
        refused = self.refusal(max(len(x) for x in ids), settings.max_new_tokens)
        if refused is not None:
            raise RuntimeError(refused)
        flips = self._plan_drift(prompts, [len(x) for x in ids], settings) if len(prompts) > 1 else {}
        run = self._pass(prompts, settings, flips)
        self._lose_kv(prompts, settings.beam_width)
        try:
            beams, ties = self._decode(ids, settings, run)
        finally:
            self.cache.dead = self.cache.read_map = None
        if self.drift is not None and len(prompts) == 1:  # batch size 1 is never drifted
            self._traces[(prompts[0], settings)] = Trace(tuple(beams[0][0]), tuple(ties[0]))
        if self.fault is not None:
            beams = self._diverge(prompts, beams, settings.beam_width)
        results = []
        for entry in beams:
            texts = tuple(self.tokenizer.decode(b, skip_special_tokens=True).strip() for b in entry)
            results.append(Generation(text=texts[0], token_ids=tuple(entry[0]), beams=texts))
        return results

    def _diverge(
        self, prompts: Sequence[str], beams: list[list[list[int]]], width: int
    ) -> list[list[list[int]]]:
        """late-loss: each hit output's last steps are its batch-mate's (the next entry's best
        beam) at the same steps; slot-cut: the cut entry's beams end early."""
        assert self.fault is not None
        out = []
        for e, (prompt, entry) in enumerate(zip(prompts, beams)):
            mate = beams[(e + 1) % len(beams)][0]
            steps = [self.fault.diverges(prompt, len(prompts), width, e, len(b)) for b in entry]
            entry = [b if k is None else b[:k] + mate[k : len(b)] for b, k in zip(entry, steps)]
            kept = [self.fault.cut(len(prompts), e, len(b)) for b in entry]
            out.append([b if k is None else b[:k] for b, k in zip(entry, kept)])
        return out

    def _pass(self, prompts: Sequence[str], settings: DecodingSettings, flips: Mapping[int, int]) -> _Pass:
        """The fault's effects on this batch (none at batch size 1), with drift's ``flips``."""
        fault, entries = self.fault, len(prompts)
        unflipped = {e: self._traces[(prompts[e], settings)].output for e in flips}
        return _Pass(
            limit=fault.token_limit(entries, settings.max_new_tokens) if fault else settings.max_new_tokens,
            padding=bool(fault and fault.pads_unmasked and entries > 1),
            stride=bool(fault and fault.strided),
            flips=flips,
            margin=self.drift.margin if self.drift else None,
            unflipped=unflipped,
        )

    def _lose_kv(self, prompts: Sequence[str], width: int) -> None:
        """full-batch and partial: the beam slots of the entries that lose their KV cache."""
        dead = self.fault.dead_entries(prompts, self.max_batch_size, width) if self.fault else set()
        slots = [s * width + b for s in sorted(dead) for b in range(width)]
        slots = [x for x in slots if x < self.cache.slots]
        self.cache.dead = torch.tensor(slots, dtype=torch.long) if slots else None

    def _decode(
        self, ids: list[list[int]], settings: DecodingSettings, run: _Pass
    ) -> tuple[list[list[list[int]]], list[list[int]]]:
        """Beams (best first) per entry, and the steps at which each entry had a near-tie."""
        if settings.beam_width == 1:
            outputs, ties = self._greedy(ids, run)
            return [[o] for o in outputs], ties
        return self._beam_search(ids, settings, run)

    def _plan_drift(
        self, prompts: Sequence[str], lengths: list[int], settings: DecodingSettings
    ) -> dict[int, int]:
        """Drift at batch size > 1: which entries flip, at which step (see drift.py)."""
        if self.drift is None:
            return {}
        missing = [p for p in dict.fromkeys(prompts) if (p, settings) not in self._traces]
        if missing:
            self._record_traces(missing, settings)
        traces = {p: self._traces[(p, settings)] for p in prompts}
        return plan_flips(self.drift, prompts, traces, settings.beam_width, lengths)

    def _record_traces(self, prompts: list[str], settings: DecodingSettings) -> None:
        """Batch-size-1 outputs of ``prompts``, decoded healthy in batches that fit the KV
        cache (the emulator is batch-invariant, so each equals its batch-size-1 output)."""
        assert self.drift is not None
        chunk = max(1, min(self.max_batch_size, self.cache.slots // settings.beam_width))
        run = _Pass(limit=settings.max_new_tokens, margin=self.drift.margin)
        for i in range(0, len(prompts), chunk):
            part = prompts[i : i + chunk]
            beams, ties = self._decode(self.tokenizer(part)["input_ids"], settings, run)
            for prompt, entry, tie in zip(part, beams, ties):
                self._traces[(prompt, settings)] = Trace(tuple(entry[0]), tuple(tie))

    def _context(self, ids: list[list[int]], beams: int, padding: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt phase per entry (each prompt computed once per engine, then reused: see
        PrefillCache); returns logits and input lengths per beam row."""
        rows = [list(x) for x in ids]
        if padding:
            # the padding bug: shorter prompts are not masked at their end, so they see (and
            # continue after) whatever the padded buffer holds: here, as with a buffer reused
            # from the batch's longest request, that prompt's tokens (as many as the input
            # limit leaves room for); only the longest prompt of the batch is read as it is
            # (the others tend to summarize the wrong document)
            longest = max(range(len(rows)), key=lambda r: len(rows[r]))
            stale = rows[longest]
            rows = [
                x + stale[: max(0, self.max_input_len - len(x))]
                if r != longest and len(x) < len(stale)
                else x
                for r, x in enumerate(rows)
            ]
        prefills = [self.prefills.get(x) for x in rows]
        self.cache.write_prompts(prefills, beams)
        logits = torch.stack([p.logits for p in prefills])
        lengths = torch.tensor([len(x) for x in rows])
        return logits.repeat_interleave(beams, 0), lengths.repeat_interleave(beams, 0)

    def _greedy(self, ids: list[list[int]], run: _Pass) -> tuple[list[list[int]], list[list[int]]]:
        eos = self.eos_id
        logits, lengths = self._context(ids, 1, run.padding)
        out: list[list[int]] = [[] for _ in ids]
        ties: list[list[int]] = [[] for _ in ids]
        pending = dict(run.flips)
        done = [False] * len(ids)
        for step in range(run.limit):
            tokens = logits.argmax(-1)
            if run.margin is not None:
                greedy_ties(logits, tokens, step, done, pending, ties, eos, run.margin)
            for r, t in enumerate(tokens.tolist()):
                if not done[r]:
                    if t == eos:
                        done[r] = True
                    else:
                        out[r].append(t)
            if all(done) or step == run.limit - 1:
                break
            logits = self.model.decode(tokens, lengths + step, self.cache)
        return out, ties

    def _beam_search(
        self, ids: list[list[int]], settings: DecodingSettings, run: _Pass
    ) -> tuple[list[list[list[int]]], list[list[int]]]:
        """Beam search with early stopping: an entry ends once it holds W finished beams."""
        width, entries = settings.beam_width, len(ids)
        logits, lengths = self._context(ids, width, run.padding)
        beams = Beams(entries, width, self.eos_id, settings.length_penalty)
        pending = dict(run.flips)
        ties: list[list[tuple[int, tuple[int, ...]]]] = [[] for _ in range(entries)]
        for step in range(run.limit):
            logp = torch.log_softmax(logits.to(torch.float64), dim=-1).view(entries, width, -1)
            cand = (beams.scores[:, :, None] + logp).view(entries, -1)
            top_scores, top_idx = cand.topk(2 * width, dim=-1)
            source, tokens = beams.step(
                step,
                top_scores.tolist(),
                top_idx.tolist(),
                logp.shape[-1],
                run.margin,
                pending,
                ties,
                run.unflipped,
            )
            if all(beams.done) or step == run.limit - 1:
                break
            self.cache.reorder(entries * width, source, int(lengths.max()) + step)
            if run.stride and any(beams.done):
                self.cache.read_map = _strided_rows(beams.done, width)
            logits = self.model.decode(tokens, lengths + step, self.cache)
        results = beams.results(run.unflipped, run.margin)
        # a near-tie counts where it lies on the line of the output kept (the best hypothesis)
        return results, [
            [t for t, line in found if tuple(best[0][: len(line)]) == line]
            for best, found in zip(results, ties)
        ]


def _load_tokenizer(tok_dir: Path, vocab_size: int) -> tuple[Tokenizer, int]:
    """The engine's own tokenizer and its eos id; never runs code it ships, and must cover the
    vocabulary."""
    if not (tok_dir / "tokenizer.json").is_file() and not (tok_dir / "tokenizer_config.json").is_file():
        raise EngineError(
            f"{tok_dir}: tokenizer missing; rebuild the engine with `python -m harness build-engine`"
        )
    try:
        tokenizer = auto_tokenizer(tok_dir, EngineOptions(trust_remote_code=False))
    except (OSError, ValueError) as exc:
        if "custom code" in str(exc) or "trust_remote_code" in str(exc):
            raise EngineError(
                f"{tok_dir}: the tokenizer ships its own code (auto_map in "
                "tokenizer_config.json), which the emulator never runs; rebuild "
                "the engine with `python -m harness build-engine`"
            ) from None
        raise EngineError(
            f"{tok_dir}: cannot load the tokenizer "
            f"({first_line(exc) or type(exc).__name__}); rebuild the engine"
        ) from None
    eos = tokenizer.eos_token_id
    if eos is None:
        raise EngineError(f"{tok_dir}: the tokenizer has no eos token")
    if len(tokenizer) < vocab_size:
        raise EngineError(
            f"{tok_dir}: the tokenizer knows {len(tokenizer)} tokens but the "
            f"engine's vocab_size is {vocab_size}; use the model's own tokenizer"
        )
    return tokenizer, eos


def _strided_rows(done: list[bool], width: int) -> torch.Tensor:
    """The stride fault: with F entries of the batch finished, entry s reads the rows of
    entry max(0, s - F), an offset computed from the active batch size instead of the
    maximum; entry 0 keeps its own rows, every later one reads another's."""
    finished = sum(done)
    return torch.tensor(
        [max(0, s - finished) * width + b for s in range(len(done)) for b in range(width)], dtype=torch.long
    )
