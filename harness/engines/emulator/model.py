"""A Mistral-architecture forward pass over a statically allocated, slot-indexed KV cache.

This mimics how a TensorRT-LLM engine holds its KV cache: one buffer allocated at load
time for ``max_batch_size x max_beam_width`` beam slots, beam b of batch entry s living in
slot ``s * num_beams + b``. Rows whose slot lies beyond the allocation read memory that
was never written (zeros) and their writes are dropped, silently, as in the incident.
Context attention uses the freshly computed keys and values (like context FMHA); decode
attention reads the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.errors import EngineError, first_line


@dataclass(frozen=True)
class ModelShape:
    """The architecture numbers the forward pass needs."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    rope_theta: float
    rms_norm_eps: float


class SlotKVCache:
    """Keys and values for ``slots`` beam slots of up to ``max_seq_len`` positions."""

    def __init__(self, shape: ModelShape, slots: int, max_seq_len: int, dtype: torch.dtype) -> None:
        dims = (shape.num_layers, slots, shape.num_kv_heads, max_seq_len, shape.head_size)
        self.k = torch.zeros(dims, dtype=dtype)
        self.v = torch.zeros(dims, dtype=dtype)
        self.slots = slots
        self.max_seq_len = max_seq_len
        self.dead: torch.Tensor | None = None  # slots whose KV is lost (fault models)
        self.read_map: torch.Tensor | None = None  # row -> slot read by decode (fault models)

    def _drop_dead(self, layer: int | slice = slice(None)) -> None:
        """Zero the lost slots of ``layer`` (default: every layer)."""
        if self.dead is not None:
            self.k[layer, self.dead] = 0
            self.v[layer, self.dead] = 0

    def write_prompts(self, prompts: Sequence[Prefill], beams: int) -> None:
        """Give every beam slot of entry s (``s * beams + b``) entry s's prompt keys and
        values, all layers at once, and zeros after them: what a slot holds past its prompt
        never depends on an earlier batch. Slots past the allocation are not there: their
        writes are lost."""
        for s, pre in enumerate(prompts):
            first, last = s * beams, min((s + 1) * beams, self.slots)
            if first >= last:
                break
            n = pre.k.shape[2]
            for store, part in ((self.k, pre.k), (self.v, pre.v)):
                store[:, first:last, :, :n] = part[:, None]
                store[:, first:last, :, n:] = 0
        self._drop_dead()

    def write_slot(self, slot: int, prompt: Prefill) -> None:
        """One slot's prompt keys and values, all layers, and zeros after them (the in-flight
        path admits one request at a time into the slot it frees for it)."""
        n = prompt.k.shape[2]
        for store, part in ((self.k, prompt.k), (self.v, prompt.v)):
            store[:, slot, :, :n] = part
            store[:, slot, :, n:] = 0

    def write_at(self, layer: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store one new position per row (row r at ``positions[r]``); k/v ``[rows, kv_heads, D]``."""
        n = min(k.shape[0], self.slots)
        idx = torch.arange(n)
        self.k[layer, idx, :, positions[:n]] = k[:n]
        self.v[layer, idx, :, positions[:n]] = v[:n]
        self._drop_dead(layer)

    def read(self, layer: int, rows: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """k/v of slots 0..rows-1 for positions 0..length-1; unallocated slots read zeros."""
        if self.read_map is not None:  # a fault model reads other rows than its own
            slots = self.read_map[:rows]
            k = self.k[layer, slots.clamp(max=self.slots - 1), :, :length].clone()
            v = self.v[layer, slots.clamp(max=self.slots - 1), :, :length].clone()
            k[slots >= self.slots] = 0
            v[slots >= self.slots] = 0
            return k, v
        n = min(rows, self.slots)
        k = self.k[layer, :n, :, :length]
        v = self.v[layer, :n, :, :length]
        if rows > n:
            pad = torch.zeros((rows - n, *k.shape[1:]), dtype=k.dtype)
            k, v = torch.cat([k, pad]), torch.cat([v, pad])
        return k, v

    def reorder(self, rows: int, source: torch.Tensor, length: int) -> None:
        """Beam search: row r continues the history of row ``source[r]`` (same entry)."""
        n = min(rows, self.slots)
        # only the rows that continue another row's history are copied
        moved = (source[:n] != torch.arange(n)).nonzero().flatten()
        if moved.numel() == 0:
            return
        src = source[moved]
        for store in (self.k, self.v):
            gathered = store[:, src.clamp(max=self.slots - 1), :, :length]
            gathered[:, src >= self.slots] = 0  # read from beyond the allocation
            store[:, moved, :, :length] = gathered


def allocate_cache(
    shape: ModelShape, slots: int, max_seq_len: int, dtype: torch.dtype, file: Path
) -> SlotKVCache:
    """The KV cache the build limits ask for; EngineError naming them when it cannot exist."""
    size = (
        2
        * shape.num_layers
        * slots
        * shape.num_kv_heads
        * max_seq_len
        * shape.head_size
        * torch.tensor([], dtype=dtype).element_size()
    )
    try:
        return SlotKVCache(shape, slots, max_seq_len, dtype)
    except (RuntimeError, MemoryError, OverflowError, TypeError) as exc:
        raise EngineError(
            f"{file}: the KV cache of max_batch_size x max_beam_width = {slots} beam "
            f"slots x max_seq_len {max_seq_len} needs {size / 2**30:.1f} GiB and "
            f"cannot be allocated ({first_line(exc) or type(exc).__name__}); "
            "rebuild the engine with smaller limits"
        ) from None


@dataclass(frozen=True)
class Prefill:
    """One prompt's context phase: keys and values ``[layers, kv_heads, L, D]``, logits ``[V]``."""

    k: torch.Tensor
    v: torch.Tensor
    logits: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for t in (self.k, self.v, self.logits))


class PrefillCache:
    """Prompt phases reused across batches, keyed by the prompt's token ids, least recently
    used dropped past ``max_bytes`` (TensorRT-LLM reuses KV blocks of a repeated prompt the
    same way). The harness asks for every prompt at every position of every cell, so without
    it most of the prompt-phase work would be repeated. A rotation's batches are windows of one
    ring, so a prompt comes again within a few batches: 64 MiB (about 160 prompts of 200
    tokens of the bundled model in float32) keeps a whole dataset of that size and bounds a
    larger one's memory."""

    def __init__(self, model: MistralEmulator, max_bytes: int = 64 * 2**20) -> None:
        self.model, self.max_bytes = model, max_bytes
        self._entries: OrderedDict[tuple[int, ...], Prefill] = OrderedDict()
        self._bytes = 0

    def get(self, ids: Sequence[int]) -> Prefill:
        key = tuple(ids)
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit
        pre = self.model.prefill(torch.tensor(key, dtype=torch.long))
        self._entries[key] = pre
        self._bytes += pre.nbytes
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.nbytes
        return pre

    def __len__(self) -> int:
        return len(self._entries)


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding ``x * cos + rotate_half(x) * sin``, with rotate_half(x) = [-x2, x1]
    written as the halves swapped times a sin whose first half is negated (the same products:
    IEEE multiplication is symmetric in sign)."""
    half = x.shape[-1] // 2
    swapped: torch.Tensor = x.unflatten(-1, (2, half)).flip(-2).flatten(-2)
    rotated: torch.Tensor = x * cos + swapped * signed_sin
    return rotated


class MistralEmulator:
    """Weights plus the forward passes the engine's decoding loops call."""

    def __init__(self, shape: ModelShape, weights: dict[str, torch.Tensor], dtype: torch.dtype) -> None:
        self.shape = shape
        self.dtype = dtype
        w = {k: v.to(dtype) for k, v in weights.items()}
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"]
        self.lm_head = w["lm_head.weight"] if "lm_head.weight" in w else self.embed
        self.layers = []
        for i in range(shape.num_layers):
            p = f"model.layers.{i}."
            self.layers.append(
                {
                    "ln1": w[p + "input_layernorm.weight"],
                    "ln2": w[p + "post_attention_layernorm.weight"],
                    "qkv": torch.cat(
                        [
                            w[p + "self_attn.q_proj.weight"],
                            w[p + "self_attn.k_proj.weight"],
                            w[p + "self_attn.v_proj.weight"],
                        ]
                    )
                    .t()
                    .contiguous(),
                    "o": w[p + "self_attn.o_proj.weight"].t().contiguous(),
                    "gate_up": torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]])
                    .t()
                    .contiguous(),
                    "down": w[p + "mlp.down_proj.weight"].t().contiguous(),
                }
            )
        d = shape.head_size
        self.inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        self._rope_cos = self._rope_sin = torch.empty((0, d), dtype=dtype)

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # one op, bit for bit x * rsqrt(mean(x^2) + eps) * weight (tests/unit/engines/test_emulator.py)
        return torch.nn.functional.rms_norm(x, weight.shape, weight, self.shape.rms_norm_eps)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[..., D]`` at ``positions``, sin with its first half negated (see
        ``_rotate``), from a table grown on demand (the same values computed once)."""
        need = int(positions.max()) + 1 if positions.numel() else 0
        if need > self._rope_cos.shape[0]:
            size = max(need, 2 * self._rope_cos.shape[0], 256)
            freqs = torch.arange(size).to(torch.float64)[:, None] * self.inv_freq
            emb = torch.cat((freqs, freqs), dim=-1)
            half = emb.shape[-1] // 2
            sin = emb.sin()
            self._rope_cos = emb.cos().to(self.dtype)
            self._rope_sin = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1).to(self.dtype)
        return self._rope_cos[positions], self._rope_sin[positions]

    def _split(self, h: torch.Tensor, layer: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        s = self.shape
        qkv = h @ layer["qkv"]
        q_end = s.num_heads * s.head_size
        kv_end = q_end + s.num_kv_heads * s.head_size
        return qkv[..., :q_end], qkv[..., q_end:kv_end], qkv[..., kv_end:]

    def _mlp(self, x: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        h = self._rms(x, layer["ln2"])
        gate, up = (h @ layer["gate_up"]).chunk(2, dim=-1)
        return x + (torch.nn.functional.silu(gate) * up) @ layer["down"]

    def prefill(self, ids: torch.Tensor) -> Prefill:
        """The prompt phase of one prompt ``[L]`` on its own (like context FMHA, on the
        freshly computed keys and values): its keys and values per layer and its last
        token's logits. It depends on nothing but the prompt, so it is the same at every
        batch size and position, and can be reused (``PrefillCache``)."""
        s = self.shape
        width = ids.shape[0]
        x = self.embed[ids][None]  # [1, L, hidden]
        cos, sin = self._rope(torch.arange(width))  # [L, D]
        keys, values = [], []
        for layer in self.layers:
            h = self._rms(x, layer["ln1"])
            q, k, v = self._split(h, layer)
            q = q.view(1, width, s.num_heads, s.head_size).transpose(1, 2)
            k = k.view(1, width, s.num_kv_heads, s.head_size).transpose(1, 2)
            v = v.view(1, width, s.num_kv_heads, s.head_size).transpose(1, 2)
            q = _rotate(q, cos, sin)
            k = _rotate(k, cos, sin)
            keys.append(k[0])
            values.append(v[0])
            out = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=True
            )  # [1, H, L, D]
            out = out.transpose(1, 2).reshape(1, width, s.num_heads * s.head_size)
            x = self._mlp(x + out @ layer["o"], layer)
        logits = self._rms(x[0, -1], self.norm) @ self.lm_head.t()
        return Prefill(torch.stack(keys), torch.stack(values), logits)

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, cache: SlotKVCache) -> torch.Tensor:
        """One step: token ``[R]`` at ``positions[R]``; returns logits ``[R, V]``."""
        s = self.shape
        rows = tokens.shape[0]
        groups = s.num_heads // s.num_kv_heads
        length = int(positions.max()) + 1
        x = self.embed[tokens]
        cos, sin = self._rope(positions)  # [R, D]
        cos, sin = cos[:, None, :], sin[:, None, :]
        # query heads of one KV group side by side: [R, Hkv, G, D] against keys [R, Hkv, T, D]
        masked = (torch.arange(length)[None, :] > positions[:, None])[:, None, None, :]
        scale = s.head_size**-0.5
        kv_end = (s.num_heads + s.num_kv_heads) * s.head_size  # queries and keys; then values
        for i, layer in enumerate(self.layers):
            h = self._rms(x, layer["ln1"])
            qkv = h @ layer["qkv"]
            # queries and keys rotated in one go: [R, H + Hkv, D]
            qk = qkv[:, :kv_end].view(rows, s.num_heads + s.num_kv_heads, s.head_size)
            qk = _rotate(qk, cos, sin)
            q = qk[:, : s.num_heads].view(rows, s.num_kv_heads, groups, s.head_size)
            k = qk[:, s.num_heads :]
            v = qkv[:, kv_end:].view(rows, s.num_kv_heads, s.head_size)
            cache.write_at(i, positions, k, v)
            kc, vc = cache.read(i, rows, length)
            scores = (q @ kc.transpose(-1, -2)) * scale
            attn = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1) @ vc
            x = self._mlp(x + attn.reshape(rows, s.num_heads * s.head_size) @ layer["o"], layer)
        return self._rms(x, self.norm) @ self.lm_head.t()
