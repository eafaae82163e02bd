"""A Mistral-architecture forward pass over a statically allocated, slot-indexed KV cache.

This mimics how a TensorRT-LLM engine holds its KV cache: one buffer allocated at load
time for ``max_batch_size x max_beam_width`` beam slots, beam b of batch entry s living in
slot ``s * num_beams + b``. Rows whose slot lies beyond the allocation read memory that
was never written (zeros) and their writes are dropped, silently, as in the incident.
Context attention uses the freshly computed keys and values (like context FMHA); decode
attention reads the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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

    def _drop_dead(self, layer: int) -> None:
        if self.dead is not None:
            self.k[layer, self.dead] = 0
            self.v[layer, self.dead] = 0

    def write(self, layer: int, rows: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k/v ``[rows, kv_heads, T, D]`` at positions start..start+T-1 of slots 0..rows-1.

        Slots past the allocation are not there: their writes are lost.
        """
        n = min(rows, self.slots)
        end = start + k.shape[2]
        self.k[layer, :n, :, start:end] = k[:n]
        self.v[layer, :n, :, start:end] = v[:n]
        self._drop_dead(layer)

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


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


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
            self.layers.append({
                "ln1": w[p + "input_layernorm.weight"],
                "ln2": w[p + "post_attention_layernorm.weight"],
                "qkv": torch.cat([w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"],
                                  w[p + "self_attn.v_proj.weight"]]).t().contiguous(),
                "o": w[p + "self_attn.o_proj.weight"].t().contiguous(),
                "gate_up": torch.cat([w[p + "mlp.gate_proj.weight"],
                                      w[p + "mlp.up_proj.weight"]]).t().contiguous(),
                "down": w[p + "mlp.down_proj.weight"].t().contiguous(),
            })
        d = shape.head_size
        self.inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.shape.rms_norm_eps) * weight

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float64)[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

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

    def context(self, ids: torch.Tensor, lengths: torch.Tensor, cache: SlotKVCache,
                beams: int = 1) -> torch.Tensor:
        """Run right-padded prompts ``[B, L]`` once each; give every beam slot of entry s
        (``s * beams + b``) a copy of its keys and values; return last-token logits ``[B, V]``.

        Right padding with a causal mask keeps real tokens from seeing padding; padding's
        own cache entries are overwritten by decode steps before anything reads them.
        """
        s = self.shape
        rows, width = ids.shape
        x = self.embed[ids]
        cos, sin = self._rope(torch.arange(width))  # [L, D]
        for i, layer in enumerate(self.layers):
            h = self._rms(x, layer["ln1"])
            q, k, v = self._split(h, layer)
            q = q.view(rows, width, s.num_heads, s.head_size).transpose(1, 2)
            k = k.view(rows, width, s.num_kv_heads, s.head_size).transpose(1, 2)
            v = v.view(rows, width, s.num_kv_heads, s.head_size).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            if beams == 1:
                cache.write(i, rows, 0, k, v)
            else:
                cache.write(i, rows * beams, 0, k.repeat_interleave(beams, 0),
                            v.repeat_interleave(beams, 0))
            out = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=True)  # [B, H, L, D]
            out = out.transpose(1, 2).reshape(rows, width, s.num_heads * s.head_size)
            x = self._mlp(x + out @ layer["o"], layer)
        last = x[torch.arange(rows), lengths - 1]
        return self._rms(last, self.norm) @ self.lm_head.t()

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
        scale = s.head_size ** -0.5
        for i, layer in enumerate(self.layers):
            h = self._rms(x, layer["ln1"])
            q, k, v = self._split(h, layer)
            q = q.view(rows, s.num_heads, s.head_size)
            k = k.view(rows, s.num_kv_heads, s.head_size)
            v = v.view(rows, s.num_kv_heads, s.head_size)
            q = (q * cos + _rotate_half(q) * sin).view(rows, s.num_kv_heads, groups, s.head_size)
            k = k * cos + _rotate_half(k) * sin
            cache.write_at(i, positions, k, v)
            kc, vc = cache.read(i, rows, length)
            scores = (q @ kc.transpose(-1, -2)) * scale
            attn = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1) @ vc
            x = self._mlp(x + attn.reshape(rows, s.num_heads * s.head_size) @ layer["o"], layer)
        return self._rms(x, self.norm) @ self.lm_head.t()
