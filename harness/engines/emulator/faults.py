"""Fault models an emulator engine can be built with, each modelled on a real report.

Every fault is switched on at build time (``python -m harness build-engine --fault KIND``),
stored in config.json (``emulator.fault``) and applied by the engine's decoding loops. The
beam-slot overflow of the incident needs no fault: it follows from the build limits
(``--max-beam-width 1`` run at ``--beam-widths 4``). Benign drift (``--drift RATE``, stored
as ``emulator.drift``; see drift.py) composes with any of them and with the overflow;
``--fault drift[:rate=R,seed=S]`` is drift alone.

None of them touches batch size 1 (tests/unit/engines/test_faults.py checks it), so batch size 1
stays the trusted level, as on real engines.

==============  ==========================================================================
kind            what it does (and the real report it follows, see trtllm-facts.md §5)
==============  ==========================================================================
drift           benign: near-tied candidates flip with the batch shape, as kernels chosen
                by batch size make them flip on GPUs (#1879, #1336, #1250). A share
                ``rate`` of the outputs at batch size > 1 take the runner-up of one
                near-tie, typically after 40-80% of their words, at every position alike;
                quality against the references is unchanged. Must NOT fail. Parameters:
                ``rate`` (default 0.3), ``seed``, ``margin`` (nats). See drift.py.
full-batch      only when the batch is completely full (``max_batch_size`` prompts), the
                entry at ``slot`` loses its KV cache and decodes garbage (#2072: any 15 of 16
                prompts were fine). Parameter: ``slot`` (default: the last one).
padding         prompts shorter than the longest in the batch are not masked at their end:
                they read on into the padded buffer, which holds stale data (here the
                batch's longest prompt), and generation starts after it (#1881: only the
                longest prompt was correct); they tend to summarize the wrong document.
                Damage follows prompt length, not position.
stride          beam search only: once F entries of the batch have finished, entry s reads
                the KV rows of entry s - F, an offset taken from the active batch size
                instead of the maximum (PR #15125). Position 0 is never hit; every later
                position is, on the prompts still running when a batch-mate finishes.
partial         the entry at ``position`` loses its KV cache on a seeded ``fraction`` of
                prompts only (by a hash of the prompt), a sensitivity knob.
graph-ladder    a CUDA-graph batch-size ladder: graphs are captured at batch sizes 1, 2, 4, 8,
                ... and a batch is padded up to the next captured size; the entries beyond
                the previous captured size read a stale KV region and decode garbage
                (#17964: batch 4 passes, 5 fails). Captured sizes pass: 5, 6, 7 fail
                (positions 4-6), 8 passes, 9-15 fail (positions 8-14), 16 passes.
beam-buffer     a decode buffer sized for max_batch_size sequences without the beam factor
                (PR #17014: passes at batch 8, fails at 16 with beam 2): the entries whose
                beam slots (entry x beam width + beam) reach past max_batch_size lose their
                KV cache. Greedy never overflows; beam W fails from the batch size at which
                entry x W + W - 1 reaches max_batch_size.
truncate        uniform damage: at batch size > 1 every entry stops after ``keep`` x
                max_new_tokens tokens (default 0.3), at every position alike, as when a
                batched path takes its output budget from the wrong field (a per-batch
                limit, a sequence length counted with the padding). Outputs are cut short
                everywhere, which no comparison between positions can see.
late-loss       mild damage spread over the engine: at batch size > 1 a seeded
                ``fraction`` of the outputs (by a hash of prompt, batch size, beam width
                and position) diverge late: their last ``loss`` (default a third) is the
                batch-mate's output at the same steps, as when an entry reads the next
                entry's state late in decoding. Every position and batch size alike: each
                cell loses a little, none enough for its own tests; only the engine as a
                whole shows it.
slot-cut        one slot of one batch size: in batches of exactly ``batch`` entries, the entry
                at ``position`` stops after ``keep`` (default 0.3, as for truncate) of the tokens it would
                have generated, on every prompt, as when a slot past a kernel's tile (an odd
                batch size split over tiles of two or four) is retired early. Every other
                batch size and position is untouched, so only a sweep reaches it, and a
                sparse sweep seats few prompts there. Parameters: ``batch`` (default 6),
                ``position`` (default 4), ``keep``.
stale-slot      in flight only (inflight.py, like the three below; bulk ``generate`` is never
                touched): a slot refilled after an earlier request of the session keeps that
                occupant's keys and values over the first half of the new prompt.
prefill-corrupt in flight only: while a prompt longer than the prefill chunk is admitted,
                each chunk's keys and values land in the slots decoding at that step too.
warm-cache      in flight only: a prompt served again from the session's prefix cache reads
                every KV block (16 positions) of its prompt but the first and last as zeros.
inflight-graph  in flight only: a decode step over A requests, A not a power of two, runs
                the graph captured for the next power; the requests past the previous power
                read another request's KV (damage follows how many are in flight).
==============  ==========================================================================
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from harness.engines.emulator.drift import DEFAULT_MARGIN, DEFAULT_RATE, Drift, check_drift
from harness.errors import ConfigError
from harness.model.cell import captured_below, is_captured
from harness.model.json import Json
from harness.model.vocab import Word


class FaultKind(Word):
    """The fault models (the table above)."""

    DRIFT = "drift"
    FULL_BATCH = "full-batch"
    PADDING = "padding"
    STRIDE = "stride"
    PARTIAL = "partial"
    TRUNCATE = "truncate"
    GRAPH_LADDER = "graph-ladder"
    BEAM_BUFFER = "beam-buffer"
    LATE_LOSS = "late-loss"
    SLOT_CUT = "slot-cut"
    STALE_SLOT = "stale-slot"
    PREFILL_CORRUPT = "prefill-corrupt"
    WARM_CACHE = "warm-cache"
    INFLIGHT_GRAPH = "inflight-graph"


# the faults of the in-flight path alone (inflight.py): bulk generate never sees them
IN_FLIGHT_ONLY = frozenset(
    {FaultKind.STALE_SLOT, FaultKind.PREFILL_CORRUPT, FaultKind.WARM_CACHE, FaultKind.INFLIGHT_GRAPH}
)


KINDS = ", ".join(k.value for k in FaultKind)
PARAMETERS: dict[FaultKind, frozenset[str]] = {
    FaultKind.DRIFT: frozenset({"rate", "seed", "margin"}),
    FaultKind.FULL_BATCH: frozenset({"slot"}),
    FaultKind.PADDING: frozenset(),
    FaultKind.STRIDE: frozenset(),
    FaultKind.PARTIAL: frozenset({"position", "fraction", "seed"}),
    FaultKind.TRUNCATE: frozenset({"keep"}),
    FaultKind.GRAPH_LADDER: frozenset(),
    FaultKind.BEAM_BUFFER: frozenset(),
    FaultKind.LATE_LOSS: frozenset({"fraction", "loss", "seed"}),
    FaultKind.SLOT_CUT: frozenset({"batch", "position", "keep"}),
    **{kind: frozenset() for kind in IN_FLIGHT_ONLY},
}
FLOATS = frozenset({"rate", "margin", "fraction", "keep", "loss"})
# Any: a parameter's type follows its key (those in FLOATS are floats, the others ints), which a
# type checker cannot follow through Fault(**...) and Drift(**...)
Parameters = dict[str, Any]


@dataclass(frozen=True)
class Fault:
    """One fault model and its parameters (unused ones keep their defaults)."""

    kind: FaultKind
    rate: float = DEFAULT_RATE  # drift: share of sequences at batch size > 1 that flip
    seed: int = 0  # drift: which sequences flip; partial: which prompts are hit
    margin: float = DEFAULT_MARGIN  # drift: near-tie gap in nats
    slot: int | None = None  # full-batch: the entry that breaks (None: the last slot)
    position: int = 3  # partial: the position that loses quality; slot-cut: the entry cut short
    fraction: float = 0.3  # partial: share of prompts hit; late-loss: share of batched outputs hit
    keep: float = 0.3  # truncate: share of max_new_tokens generated at batch size > 1; slot-cut: share kept
    batch: int = 6  # slot-cut: the one batch size whose entry at ``position`` is cut short
    loss: float = 1 / 3  # late-loss: share of a hit output's tokens taken from its batch-mate

    def __post_init__(self) -> None:  # Fault("padding"), as config.json stores it
        object.__setattr__(self, "kind", FaultKind(self.kind))

    def as_dict(self) -> dict[str, Json]:
        return {**asdict(self), "kind": self.kind.value}

    def drift(self) -> Drift | None:
        """``--fault drift``: the drift it stands for (drift alone); None for the others."""
        if self.kind != FaultKind.DRIFT:
            return None
        return Drift(rate=self.rate, seed=self.seed, margin=self.margin)

    def describe(self) -> str:
        drift = self.drift()
        if drift is not None:
            return drift.describe()
        if self.kind == FaultKind.FULL_BATCH:
            slot = "last slot" if self.slot is None else f"slot {self.slot}"
            return f"full-batch corruption ({slot})"
        if self.kind == FaultKind.PARTIAL:
            return (
                f"partial degradation (position {self.position}, {self.fraction:.0%} of "
                f"prompts, seed {self.seed})"
            )
        if self.kind == FaultKind.TRUNCATE:
            return f"truncation at batch size > 1 ({self.keep:.0%} of max_new_tokens)"
        if self.kind == FaultKind.LATE_LOSS:
            return (
                f"late loss at batch size > 1 ({self.fraction:.0%} of outputs continue a "
                f"batch-mate's for their last {self.loss:.0%}, seed {self.seed})"
            )
        if self.kind == FaultKind.SLOT_CUT:
            return (
                f"slot cut (batch size {self.batch}, position {self.position}: every output keeps "
                f"{self.keep:.0%} of its tokens)"
            )
        return {
            FaultKind.PADDING: "padding bug",
            FaultKind.STRIDE: "uneven-finish stride",
            FaultKind.GRAPH_LADDER: "CUDA-graph ladder (padded batch sizes damage their last entries)",
            FaultKind.BEAM_BUFFER: "decode buffer sized without the beam factor",
            FaultKind.STALE_SLOT: "in flight: a refilled slot keeps its last occupant's KV",
            FaultKind.PREFILL_CORRUPT: "in flight: a chunked prefill writes into the decoding slots",
            FaultKind.WARM_CACHE: "in flight: a prompt served from the prefix cache reads zeroed KV blocks",
            FaultKind.INFLIGHT_GRAPH: "in flight: decode steps padded to a power of two misread KV",
        }[self.kind]

    # -- the hooks the engine calls -------------------------------------------------------

    def dead_entries(self, prompts: Sequence[str], max_batch_size: int, width: int = 1) -> set[int]:
        """Entries whose KV cache is lost for this call (full-batch, partial, graph-ladder,
        beam-buffer); ``width``: the beam width."""
        entries = len(prompts)
        if self.kind == FaultKind.GRAPH_LADDER:
            return set(range(captured_below(entries), entries)) if not is_captured(entries) else set()
        if self.kind == FaultKind.BEAM_BUFFER:
            return {e for e in range(entries) if e * width + width - 1 >= max_batch_size}
        if self.kind == FaultKind.FULL_BATCH and entries == max_batch_size:
            return {max_batch_size - 1 if self.slot is None else self.slot}
        if self.kind == FaultKind.PARTIAL and self.position < entries:
            if hit(prompts[self.position], self.seed, self.fraction):
                return {self.position}
        return set()

    def token_limit(self, entries: int, max_new_tokens: int) -> int:
        """How many tokens a batch of ``entries`` may generate (truncate cuts bs > 1 short)."""
        if self.kind == FaultKind.TRUNCATE and entries > 1:
            return max(1, math.ceil(self.keep * max_new_tokens))
        return max_new_tokens

    def diverges(self, prompt: str, entries: int, width: int, position: int, length: int) -> int | None:
        """late-loss: the step from which an output of ``length`` tokens continues its
        batch-mate's (None: it does not, as at batch size 1 and on the outputs not hit)."""
        if self.kind != FaultKind.LATE_LOSS or entries == 1:
            return None
        if not hit(f"{entries}x{width}/{position}/{prompt}", self.seed, self.fraction):
            return None
        return max(1, math.ceil((1.0 - self.loss) * length))

    def cut(self, entries: int, position: int, length: int) -> int | None:
        """slot-cut: how many of an output's ``length`` tokens are kept (None: all)."""
        if self.kind != FaultKind.SLOT_CUT or entries != self.batch or position != self.position:
            return None
        return max(1, math.ceil(self.keep * length))

    @property
    def pads_unmasked(self) -> bool:
        return self.kind == FaultKind.PADDING

    @property
    def strided(self) -> bool:
        return self.kind == FaultKind.STRIDE


def hit(prompt: str, seed: int, fraction: float) -> bool:
    """partial: whether a prompt is among the seeded ``fraction`` that lose quality."""
    digest = hashlib.sha256(f"{seed}/{prompt}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64 < fraction


def _parameters(text: str, items: str, kind: FaultKind, option: str) -> Parameters:
    """``k=v,...`` for ``kind``, each key checked against its parameters and typed."""
    allowed = PARAMETERS[kind]
    values: Parameters = {}
    for item in filter(None, (p.strip() for p in items.split(","))):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise ConfigError(
                f"{option} {text!r}: {item!r} is not a parameter of {kind} "
                f"(parameters: {', '.join(sorted(allowed)) or 'none'})"
            )
        try:
            values[key] = float(raw) if key in FLOATS else int(raw)
        except ValueError:
            raise ConfigError(f"{option} {text!r}: {key} must be a number, got {raw!r}") from None
    return values


def parse_fault(text: str, *, max_batch_size: int, option: str = "--fault") -> Fault:
    """``KIND[:key=value,...]``, e.g. ``partial:position=3,fraction=0.3`` or ``truncate:keep=0.5``."""
    name, _, rest = text.partition(":")
    try:
        kind = FaultKind(name.strip())
    except ValueError:
        raise ConfigError(
            f"{option} {text!r}: unknown fault {name.strip()!r}; choose one of "
            f"{KINDS} (beam-slot overflow needs no fault: build with "
            "--max-beam-width 1 and run --beam-widths 4)"
        ) from None
    fault = Fault(kind, **_parameters(text, rest, kind, option))
    return check_fault(fault, max_batch_size=max_batch_size, option=option)


def parse_drift(text: str, *, option: str = "--drift") -> Drift:
    """``RATE[:seed=S,margin=M]``, e.g. ``0.6`` or ``0.3:seed=2``."""
    raw, _, rest = text.partition(":")
    try:
        rate = float(raw)
    except ValueError:
        raise ConfigError(
            f"{option} {text!r}: the rate must be a number in (0, 1], e.g. "
            f"{option} 0.3 or {option} 0.3:seed=2"
        ) from None
    values = _parameters(text, rest, FaultKind.DRIFT, option)
    if "rate" in values:
        raise ConfigError(f"{option} {text!r}: give the rate once, before the colon")
    return check_drift(Drift(rate=rate, **values), option)


def check_fault(fault: Fault, *, max_batch_size: int, option: str) -> Fault:
    """Reject parameters that would break batch size 1 or point outside the engine."""
    if fault.kind == FaultKind.FULL_BATCH and fault.slot is not None and not 0 <= fault.slot < max_batch_size:
        raise ConfigError(
            f"{option}: slot {fault.slot} is outside the engine's "
            f"{max_batch_size} slots (0..{max_batch_size - 1})"
        )
    if fault.kind == FaultKind.FULL_BATCH and max_batch_size == 1:
        raise ConfigError(
            f"{option}: full-batch needs --max-batch-size > 1 (a full batch of 1 "
            "would break the batch-size-1 level itself)"
        )
    if fault.kind == FaultKind.PARTIAL and not 1 <= fault.position < max_batch_size:
        raise ConfigError(
            f"{option}: position {fault.position} must be between 1 and "
            f"{max_batch_size - 1} (position 0 is batch size 1's own position)"
        )
    if fault.kind in (FaultKind.PARTIAL, FaultKind.LATE_LOSS) and not 0.0 < fault.fraction <= 1.0:
        raise ConfigError(f"{option}: fraction {fault.fraction} must be in (0, 1]")
    if fault.kind == FaultKind.LATE_LOSS and not 0.0 < fault.loss < 1.0:
        raise ConfigError(
            f"{option}: loss {fault.loss} must be in (0, 1) (the share of a hit output's tokens lost)"
        )
    if fault.kind == FaultKind.SLOT_CUT and not (
        1 < fault.batch <= max_batch_size and 0 <= fault.position < fault.batch
    ):
        raise ConfigError(
            f"{option}: slot-cut batch {fault.batch} must be between 2 and the engine's max_batch_size "
            f"{max_batch_size}, and position {fault.position} inside it (0..{fault.batch - 1})"
        )
    if fault.kind in (FaultKind.TRUNCATE, FaultKind.SLOT_CUT) and not 0.0 < fault.keep < 1.0:
        raise ConfigError(
            f"{option}: keep {fault.keep} must be in (0, 1) (the share of "
            "max_new_tokens generated at batch size > 1)"
        )
    drift = fault.drift()
    if drift is not None:
        check_drift(drift, option)
    return fault


def split_fault(
    fault: Fault | None, drift: Drift | None, *, option: str = "--fault"
) -> tuple[Fault | None, Drift | None]:
    """(damage fault, drift) an engine is built with: ``--fault drift`` is drift alone, and
    asking for drift twice is refused."""
    if fault is None or fault.kind != FaultKind.DRIFT:
        return fault, drift
    if drift is not None:
        raise ConfigError(
            f"{option} drift and --drift: give the drift once (--fault KIND "
            "--drift RATE composes drift with another fault)"
        )
    return None, fault.drift()


def fault_from_config(section: Json, where: str) -> Fault | None:
    """The ``emulator.fault`` entry of config.json, or None for a healthy engine."""
    if section is None:
        return None
    if not isinstance(section, Mapping) or section.get("kind") not in set(FaultKind):
        raise ConfigError(
            f"{where}: emulator.fault must be an object with kind one of {KINDS}; rebuild the engine"
        )
    if section.get("kind") == FaultKind.DRIFT and "rate" not in section:
        raise ConfigError(
            f"{where}: emulator.fault is the scale-based drift of an older "
            "harness; rebuild the engine (python -m harness build-engine "
            "--drift RATE)"
        )
    known = set(Fault.__dataclass_fields__)
    try:
        return TypeAdapter(Fault).validate_python({k: v for k, v in section.items() if k in known})
    except ValidationError as exc:
        raise ConfigError(f"{where}: emulator.fault: {exc.errors()[0]['msg']}; rebuild the engine") from None
