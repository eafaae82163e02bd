"""The emulator engine: batched greedy and beam-search decoding over a slot KV cache.

Like a TensorRT-LLM engine it is bound by the limits it was built with (config.json's
``build_config``) and allocates its KV cache once, at load. Like the engine of the
incident it does *not* refuse ``num_beams > max_beam_width`` or a batch larger than
``max_batch_size``: the extra beam slots simply do not exist (see ``model.py``). It does
refuse a prompt plus ``max_new_tokens`` longer than ``max_seq_len``, as TensorRT-LLM does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from harness.config import DecodingSettings
from harness.engines.base import EngineBase, EngineInfo, Generation
from harness.engines.emulator.faults import Fault, fault_from_config
from harness.engines.emulator.model import MistralEmulator, ModelShape, SlotKVCache
from harness.errors import EngineError, first_line
from harness.limits.engine_config import ConfigSection, parse_config_text
from harness.storage.fingerprint import weights_identity

WEIGHTS_FILE = "rank0.safetensors"
TOKENIZER_DIR = "tokenizer"
COMPUTE_DTYPES = {"float64": torch.float64, "float32": torch.float32}


class EmulatorEngine(EngineBase):
    """An engine directory written by ``python -m harness build-engine``."""

    def __init__(self, path: str | Path) -> None:
        from safetensors.torch import load_file

        self.path = Path(path)
        file = self.path / "config.json"
        config = parse_config_text(file)
        self.config = config
        root = ConfigSection(config, str(file), "")
        pre = root.section("pretrained_config", required=True)
        build = root.section("build_config", required=True)
        emu = root.section("emulator", required=True)
        assert pre is not None and build is not None and emu is not None

        def need(section: ConfigSection, key: str) -> int:
            return section.int(key, required=True)  # type: ignore[return-value]

        self.shape = ModelShape(
            vocab_size=need(pre, "vocab_size"), hidden_size=need(pre, "hidden_size"),
            intermediate_size=need(pre, "intermediate_size"),
            num_layers=need(pre, "num_hidden_layers"), num_heads=need(pre, "num_attention_heads"),
            num_kv_heads=need(pre, "num_key_value_heads"), head_size=need(pre, "head_size"),
            rope_theta=pre.float("rope_theta", required=True),  # type: ignore[arg-type]
            rms_norm_eps=pre.float("rms_norm_eps", required=True),  # type: ignore[arg-type]
        )
        self.max_batch_size = need(build, "max_batch_size")
        self.max_beam_width = need(build, "max_beam_width")
        self.max_input_len = need(build, "max_input_len")
        self.max_seq_len = need(build, "max_seq_len")
        dtype_name = emu.str("compute_dtype")
        if dtype_name not in COMPUTE_DTYPES:
            raise EngineError(f"{file}: emulator.compute_dtype {dtype_name!r} is not one of "
                              f"{', '.join(COMPUTE_DTYPES)}")
        dtype = COMPUTE_DTYPES[dtype_name]
        self.fault: Fault | None = fault_from_config(config["emulator"].get("fault"),
                                                     str(file))

        weights_file = self.path / WEIGHTS_FILE
        if not weights_file.is_file():
            raise EngineError(f"{weights_file}: engine weights missing; rebuild the engine with "
                              "`python -m harness build-engine`")
        self.tokenizer = _load_tokenizer(self.path / TOKENIZER_DIR, self.shape.vocab_size)
        try:
            weights = load_file(str(weights_file))
        except Exception as exc:  # safetensors raises its own error types
            raise EngineError(f"{weights_file}: cannot read weights ({exc}); rebuild the engine with "
                              "`python -m harness build-engine`") from None
        try:
            self.model = MistralEmulator(self.shape, weights, dtype)
        except KeyError as exc:
            raise EngineError(f"{weights_file}: tensor {exc} missing; the weights do not match "
                              "a Mistral model") from None
        # Allocated once, for max_batch_size x max_beam_width beam slots, as at engine build.
        self.cache = _allocate_cache(self.shape, self.max_batch_size * self.max_beam_width,
                                     self.max_seq_len, dtype, file)
        self.info = EngineInfo(
            backend="emulator", path=str(self.path), identity=weights_identity([weights_file]),
            config=config, details={"compute_dtype": dtype_name,
                                    "kv_cache_slots": self.cache.slots})

    def count_tokens(self, prompts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(list(prompts))["input_ids"]]

    @torch.inference_mode()
    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        ids = self.tokenizer(list(prompts))["input_ids"]
        longest = max(len(x) for x in ids)
        if longest > self.max_input_len:
            raise RuntimeError(f"input length {longest} exceeds the engine's max_input_len "
                               f"{self.max_input_len}")
        if longest + settings.max_new_tokens > self.max_seq_len:
            raise RuntimeError(f"input length {longest} + max_new_tokens {settings.max_new_tokens} "
                               f"exceeds the engine's max_seq_len {self.max_seq_len}")
        width = settings.beam_width
        dead = self.fault.dead_entries(prompts, self.max_batch_size) if self.fault else set()
        slots = [s * width + b for s in sorted(dead) for b in range(width)]
        slots = [x for x in slots if x < self.cache.slots]
        self.cache.dead = torch.tensor(slots, dtype=torch.long) if slots else None
        try:
            if width == 1:
                beams = [[o] for o in self._greedy(ids, settings)]
            else:
                beams = self._beam_search(ids, settings)
        finally:
            self.cache.dead = self.cache.read_map = None
        results = []
        for entry in beams:
            texts = tuple(self.tokenizer.decode(b, skip_special_tokens=True).strip() for b in entry)
            results.append(Generation(text=texts[0], token_ids=tuple(entry[0]), beams=texts))
        return results

    def _context(self, ids: list[list[int]], beams: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt phase, once per entry; returns logits and input lengths per beam row."""
        lengths = torch.tensor([len(x) for x in ids])
        pad = self.tokenizer.pad_token_id or 0
        batch = torch.full((len(ids), int(lengths.max())), pad, dtype=torch.long)
        for r, x in enumerate(ids):
            batch[r, : len(x)] = torch.tensor(x)
        if self.fault is not None and self.fault.pads_unmasked and len(ids) > 1:
            # the padding bug: every prompt is taken to end where the longest one ends, so
            # shorter ones see (and continue after) the padding appended to them
            lengths = torch.full_like(lengths, int(lengths.max()))
        logits = self.model.context(batch, lengths, self.cache, beams)
        return logits.repeat_interleave(beams, 0), lengths.repeat_interleave(beams, 0)

    def _perturb(self, logits: torch.Tensor, entries: int, step: int) -> torch.Tensor:
        return self.fault.perturb(logits, entries, step) if self.fault else logits

    def _greedy(self, ids: list[list[int]], settings: DecodingSettings) -> list[list[int]]:
        eos = self.tokenizer.eos_token_id
        logits, lengths = self._context(ids, 1)
        out: list[list[int]] = [[] for _ in ids]
        done = [False] * len(ids)
        for step in range(settings.max_new_tokens):
            tokens = self._perturb(logits, len(ids), step).argmax(-1)
            for r, t in enumerate(tokens.tolist()):
                if not done[r]:
                    if t == eos:
                        done[r] = True
                    else:
                        out[r].append(t)
            if all(done) or step == settings.max_new_tokens - 1:
                break
            logits = self.model.decode(tokens, lengths + step, self.cache)
        return out

    def _beam_search(self, ids: list[list[int]], settings: DecodingSettings) -> list[list[list[int]]]:
        """Beam search with early stopping: an entry ends once it holds W finished beams."""
        eos = self.tokenizer.eos_token_id
        width, entries = settings.beam_width, len(ids)
        logits, lengths = self._context(ids, width)
        scores = torch.full((entries, width), float("-inf"), dtype=torch.float64)
        scores[:, 0] = 0.0  # all beams start equal: expand from beam 0 only
        history: list[list[int]] = [[] for _ in range(entries * width)]
        finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(entries)]
        done = [False] * entries
        vocab = logits.shape[-1]

        def norm(score: float, length: int) -> float:
            return score / (max(length, 1) ** settings.length_penalty)

        for step in range(settings.max_new_tokens):
            logits = self._perturb(logits, entries, step)
            logp = torch.log_softmax(logits.to(torch.float64), dim=-1).view(entries, width, vocab)
            cand = (scores[:, :, None] + logp).view(entries, width * vocab)
            top_scores, top_idx = cand.topk(2 * width, dim=-1)
            source = torch.arange(entries * width)
            tokens = torch.full((entries * width,), eos, dtype=torch.long)
            new_scores = torch.full((entries, width), float("-inf"), dtype=torch.float64)
            new_history: list[list[int]] = [[] for _ in range(entries * width)]
            for s in range(entries):
                if done[s]:
                    continue
                slot = 0
                for rank, (sc, ix) in enumerate(zip(top_scores[s].tolist(), top_idx[s].tolist())):
                    parent, token = divmod(ix, vocab)
                    row = s * width + parent
                    if token == eos:
                        if rank < width:
                            finished[s].append((norm(sc, step + 1), history[row]))
                        continue
                    dst = s * width + slot
                    source[dst], tokens[dst] = row, token
                    new_scores[s, slot] = sc
                    new_history[dst] = history[row] + [token]
                    slot += 1
                    if slot == width:
                        break
                if len(finished[s]) >= width:
                    done[s] = True
            scores, history = new_scores, new_history
            if all(done) or step == settings.max_new_tokens - 1:
                break
            self.cache.reorder(entries * width, source, int(lengths.max()) + step)
            if self.fault is not None and self.fault.strided and any(done):
                self.cache.read_map = _strided_rows(done, width)
            logits = self.model.decode(tokens, lengths + step, self.cache)
        results = []
        for s in range(entries):
            hyps = list(finished[s])
            if not done[s]:
                for b in range(width):
                    sc = float(scores[s, b])
                    if not math.isinf(sc):
                        hyps.append((norm(sc, len(history[s * width + b])), history[s * width + b]))
            hyps.sort(key=lambda h: -h[0])  # stable: ties keep discovery order
            results.append([h[1] for h in hyps[:width]] or [[]])
        return results


def _load_tokenizer(tok_dir: Path, vocab_size: int) -> Any:
    """The engine's own tokenizer folder, never with its code; EngineError naming the fix."""
    if not (tok_dir / "tokenizer.json").is_file() and not (tok_dir / "tokenizer_config.json").is_file():
        raise EngineError(f"{tok_dir}: tokenizer missing; rebuild the engine with "
                          "`python -m harness build-engine`")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tok_dir), trust_remote_code=False)
    except (OSError, ValueError) as exc:
        if "custom code" in str(exc) or "trust_remote_code" in str(exc):
            raise EngineError(f"{tok_dir}: the tokenizer ships its own code (auto_map in "
                              "tokenizer_config.json), which the emulator never runs; rebuild "
                              "the engine with `python -m harness build-engine`") from None
        raise EngineError(f"{tok_dir}: cannot load the tokenizer "
                          f"({first_line(exc) or type(exc).__name__}); rebuild the engine") from None
    if tokenizer.eos_token_id is None:
        raise EngineError(f"{tok_dir}: the tokenizer has no eos token")
    if len(tokenizer) < vocab_size:
        raise EngineError(f"{tok_dir}: the tokenizer knows {len(tokenizer)} tokens but the "
                          f"engine's vocab_size is {vocab_size}; use the model's "
                          "own tokenizer")
    return tokenizer


def _allocate_cache(shape: ModelShape, slots: int, max_seq_len: int, dtype: torch.dtype,
                    file: Path) -> SlotKVCache:
    """The KV cache the build limits ask for; EngineError naming them when it cannot exist."""
    size = (2 * shape.num_layers * slots * shape.num_kv_heads * max_seq_len * shape.head_size
            * torch.tensor([], dtype=dtype).element_size())
    try:
        return SlotKVCache(shape, slots, max_seq_len, dtype)
    except (RuntimeError, MemoryError, OverflowError, TypeError) as exc:
        raise EngineError(f"{file}: the KV cache of max_batch_size x max_beam_width = {slots} beam "
                          f"slots x max_seq_len {max_seq_len} needs {size / 2**30:.1f} GiB and "
                          f"cannot be allocated ({first_line(exc) or type(exc).__name__}); "
                          "rebuild the engine with smaller limits") from None


def _strided_rows(done: list[bool], width: int) -> torch.Tensor:
    """The stride fault: with F entries of the batch finished, entry s reads the rows of
    entry max(0, s - F), an offset computed from the active batch size instead of the
    maximum; entry 0 keeps its own rows, every later one reads another's."""
    finished = sum(done)
    return torch.tensor([max(0, s - finished) * width + b for s in range(len(done))
                         for b in range(width)], dtype=torch.long)
