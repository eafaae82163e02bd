"""Fault models an emulator engine can be built with, each modelled on a real report.

Every fault is switched on at build time (``python -m harness build-engine --fault KIND``),
stored in config.json (``emulator.fault``) and applied by the engine's decoding loops. The
beam-slot overflow of the incident needs no fault: it follows from the build limits
(``--max-beam-width 1`` run at ``--beam-widths 4``).

None of them touches batch size 1 (tests/unit/engines/test_faults.py checks it), so batch size 1
stays the trusted level, as on real engines.

==============  ==========================================================================
kind            what it does (and the real report it follows, see trtllm-facts.md §5)
==============  ==========================================================================
drift           benign: adds a small perturbation to the logits that depends on the batch
                shape (batch size, row, step), like kernels chosen by batch size (#1879,
                #1336). A few percent of outputs diverge late from batch size 1, at every
                position alike. Must NOT fail. Parameters: ``scale`` (logit units), ``seed``.
full-batch      only when the batch is completely full (``max_batch_size`` prompts), the
                entry at ``slot`` loses its KV cache and decodes garbage (#2072: any 15 of 16
                prompts were fine). Parameter: ``slot`` (default: the last one).
padding         prompts shorter than the longest in the batch get padding appended and
                unmasked, and generation starts after the padding (#1881: only the longest
                prompt was correct). Damage follows prompt length, not position.
stride          beam search only: once F entries of the batch have finished, entry s reads
                the KV rows of entry s - F, an offset taken from the active batch size
                instead of the maximum (PR #15125). Position 0 is never hit; every later
                position is, on the prompts still running when a batch-mate finishes.
partial         the entry at ``position`` loses its KV cache on a seeded ``fraction`` of
                prompts only (by a hash of the prompt), a sensitivity knob.
==============  ==========================================================================
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from harness.errors import ConfigError

KINDS = ("drift", "full-batch", "padding", "stride", "partial")


@dataclass(frozen=True)
class Fault:
    """One fault model and its parameters (unused ones keep their defaults)."""

    kind: str
    scale: float = 0.1  # drift: standard deviation of the logit perturbation
    seed: int = 0  # drift: perturbation stream; partial: which prompts are hit
    slot: int | None = None  # full-batch: the entry that breaks (None: the last slot)
    position: int = 3  # partial: the position that loses quality
    fraction: float = 0.3  # partial: share of prompts hit

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        if self.kind == "drift":
            return f"benign drift (scale {self.scale}, seed {self.seed})"
        if self.kind == "full-batch":
            slot = "last slot" if self.slot is None else f"slot {self.slot}"
            return f"full-batch corruption ({slot})"
        if self.kind == "partial":
            return (f"partial degradation (position {self.position}, {self.fraction:.0%} of "
                    f"prompts, seed {self.seed})")
        return {"padding": "padding bug", "stride": "uneven-finish stride"}[self.kind]

    # -- the hooks the engine calls -------------------------------------------------------

    def perturb(self, logits: torch.Tensor, entries: int, step: int) -> torch.Tensor:
        """drift: logits ``[rows, V]`` of a batch of ``entries`` prompts at decode ``step``."""
        if self.kind != "drift" or entries <= 1:
            return logits
        gen = torch.Generator().manual_seed(
            int.from_bytes(hashlib.sha256(f"{self.seed}/{entries}/{step}".encode()).digest()[:8],
                           "little"))
        noise = torch.randn(logits.shape, generator=gen, dtype=torch.float64)
        return logits + (self.scale * noise).to(logits.dtype)

    def dead_entries(self, prompts: Sequence[str], max_batch_size: int) -> set[int]:
        """Entries whose KV cache is lost for this call (full-batch, partial)."""
        entries = len(prompts)
        if self.kind == "full-batch" and entries == max_batch_size:
            return {max_batch_size - 1 if self.slot is None else self.slot}
        if self.kind == "partial" and self.position < entries:
            if hit(prompts[self.position], self.seed, self.fraction):
                return {self.position}
        return set()

    @property
    def pads_unmasked(self) -> bool:
        return self.kind == "padding"

    @property
    def strided(self) -> bool:
        return self.kind == "stride"


def hit(prompt: str, seed: int, fraction: float) -> bool:
    """partial: whether a prompt is among the seeded ``fraction`` that lose quality."""
    digest = hashlib.sha256(f"{seed}/{prompt}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64 < fraction


def parse_fault(text: str, *, max_batch_size: int, option: str = "--fault") -> Fault:
    """``KIND[:key=value,...]``, e.g. ``partial:position=3,fraction=0.3``."""
    kind, _, rest = text.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise ConfigError(f"{option} {text!r}: unknown fault {kind!r}; choose one of "
                          f"{', '.join(KINDS)} (beam-slot overflow needs no fault: build with "
                          "--max-beam-width 1 and run --beam-widths 4)")
    allowed = {"drift": {"scale", "seed"}, "full-batch": {"slot"}, "padding": set(),
               "stride": set(), "partial": {"position", "fraction", "seed"}}[kind]
    values: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or key not in allowed:
            raise ConfigError(f"{option} {text!r}: {item!r} is not a parameter of {kind} "
                              f"(parameters: {', '.join(sorted(allowed)) or 'none'})")
        try:
            values[key] = float(raw) if key in ("scale", "fraction") else int(raw)
        except ValueError:
            raise ConfigError(f"{option} {text!r}: {key} must be a number, got {raw!r}") from None
    return check_fault(Fault(kind=kind, **values), max_batch_size=max_batch_size, option=option)


def check_fault(fault: Fault, *, max_batch_size: int, option: str) -> Fault:
    """Reject parameters that would break batch size 1 or point outside the engine."""
    if fault.kind == "full-batch" and fault.slot is not None and not 0 <= fault.slot < max_batch_size:
        raise ConfigError(f"{option}: slot {fault.slot} is outside the engine's "
                          f"{max_batch_size} slots (0..{max_batch_size - 1})")
    if fault.kind == "full-batch" and max_batch_size == 1:
        raise ConfigError(f"{option}: full-batch needs --max-batch-size > 1 (a full batch of 1 "
                          "would break the batch-size-1 level itself)")
    if fault.kind == "partial" and not 1 <= fault.position < max_batch_size:
        raise ConfigError(f"{option}: position {fault.position} must be between 1 and "
                          f"{max_batch_size - 1} (position 0 is batch size 1's own position)")
    if fault.kind == "partial" and not 0.0 < fault.fraction <= 1.0:
        raise ConfigError(f"{option}: fraction {fault.fraction} must be in (0, 1]")
    if fault.kind == "drift" and not fault.scale > 0:
        raise ConfigError(f"{option}: scale {fault.scale} must be positive")
    return fault


def fault_from_config(section: Mapping[str, Any] | None, where: str) -> Fault | None:
    """The ``emulator.fault`` entry of config.json, or None for a healthy engine."""
    if section is None:
        return None
    if not isinstance(section, Mapping) or section.get("kind") not in KINDS:
        raise ConfigError(f"{where}: emulator.fault must be an object with kind one of "
                          f"{', '.join(KINDS)}; rebuild the engine")
    known = set(Fault.__dataclass_fields__)
    try:
        return Fault(**{k: v for k, v in section.items() if k in known})
    except TypeError as exc:
        raise ConfigError(f"{where}: emulator.fault: {exc}; rebuild the engine") from None
