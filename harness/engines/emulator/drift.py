"""Benign batch-shape drift: near-tied candidates that flip with the shape of the batch.

On a GPU the kernels (tile sizes, split-K reductions, attention splits) are chosen by the
batch's shape, so the same prompt's logits differ in their last bits between batch size 1
and batch size 8. Where two candidates are nearly tied that is enough to take the runner-up,
and the output goes on differently from there; elsewhere nothing changes. Quality is not
hurt: the runner-up of a near-tie is as good a continuation as the winner.

The emulator makes that happen on purpose, seeded and measurable:

- at batch size 1 nothing changes, ever;
- at batch size > 1 a sequence *flips* with probability ``rate``, decided by a hash of its
  own prompt and the batch's shape (batch size, beam width, the batch's padded length and
  its total prompt tokens, ``seed``), never by its position, so every position is alike and
  the same prompt in the same batch shape gives the same output at any position;
- a flipping sequence takes the runner-up at one near-tie (the top two candidates of one
  step within ``margin`` nats of each other, neither of them the end token) in the last 60%
  of the length its batch-size-1 output has: the first near-tie at or after a hashed
  fraction (40-80%) of that length, else the last one between 40% and there; a sequence with
  no near-tie after 40% of its length does not flip (an early flip reorders whole clauses,
  which moves ROUGE-L far more than drift does). Greedy takes the runner-up token; beam
  search swaps the scores of the best candidate and its runner-up from the same beam (the
  same prefix), so the runner-up's line leads from there, and swaps again at the next such
  near-tie while the leading line is still the batch-size-1 output; where the old line still
  wins in the end, the two best final hypotheses, if near-tied, are swapped instead, as a
  perturbed final ranking would.

Where the flip goes needs the sequence's batch-size-1 output (its length and near-ties):
the engine keeps a ``Trace`` per prompt and decoding settings, recorded whenever it decodes
a prompt alone and otherwise by a healthy batch-size-1-equivalent pass (the emulator is
batch-invariant, so that is the batch-size-1 output). A sequence with no near-tie at all
cannot flip. On the bundled model every greedy summary has near-ties after 40% of its
length (the data is built that way, see harness/bundled/synthetic.py), so with greedy
decoding the share of outputs that differ is ``rate``; beam search keeps fewer near-ties on
its best line and wins some swaps back, so fewer of its outputs differ (about 0.65 x rate at
beam width 2, 0.45 x rate at 4 on the bundled set: tests/benchmarks/drift_quality.py prints
the share measured per cell).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from pydantic import TypeAdapter, ValidationError

from harness.errors import ConfigError
from harness.model.json import Json

DEFAULT_RATE = 0.3
# Log-probability gap (nats) under which two candidates count as near-tied. On the bundled
# model the gaps at its equally valid phrasings lie under 0.6 and every other gap is far larger
# (tests/benchmarks/drift_quality.py prints the spread); runner-ups above it are wrong facts.
DEFAULT_MARGIN = 0.5
START = (0.4, 0.8)  # where in the output (share of its batch-size-1 length) a flip is placed


@dataclass(frozen=True)
class Trace:
    """A prompt's batch-size-1 output under one decoding setting (its tokens) and the decoding
    steps at which its top two candidates were near-tied, on the line of that output."""

    output: tuple[int, ...]
    ties: tuple[int, ...]

    @property
    def length(self) -> int:
        return len(self.output)

    def flip_step(self, where: float) -> int | None:
        """The near-tie a flip placed at ``where`` (a share of the length) takes, if any."""
        target = math.ceil(where * self.length)
        later = [t for t in self.ties if t >= target]
        if later:
            return later[0]
        floor = math.ceil(START[0] * self.length)
        earlier = [t for t in self.ties if floor <= t < target]
        return earlier[-1] if earlier else None


@dataclass(frozen=True)
class Drift:
    """Benign drift: the share ``rate`` of batch-size > 1 sequences that take the runner-up of a
    near-tie (with greedy decoding, the share of outputs that differ from batch size 1)."""

    rate: float = DEFAULT_RATE
    seed: int = 0
    margin: float = DEFAULT_MARGIN

    def as_dict(self) -> dict[str, Json]:
        return asdict(self)

    def describe(self) -> str:
        return f"benign drift ({self.rate:.0%} of outputs at batch size > 1, seed {self.seed})"

    def placement(
        self, prompt: str, batch_size: int, beam_width: int, padded: int, tokens: int = 0
    ) -> float | None:
        """Where (share of the batch-size-1 length) this sequence flips in a batch of this
        shape (size, beam width, padded length and total prompt tokens: what kernel choice
        sees), or None when it does not; a function of the prompt and the shape only."""
        if batch_size <= 1:
            return None
        key = f"{self.seed}/{batch_size}/{beam_width}/{padded}/{tokens}/{prompt}".encode()
        digest = hashlib.sha256(key).digest()
        flip = int.from_bytes(digest[:8], "little") / 2**64
        if flip >= self.rate:
            return None
        low, high = START
        return low + (high - low) * int.from_bytes(digest[8:16], "little") / 2**64


def plan_flips(
    drift: Drift, prompts: Sequence[str], traces: Mapping[str, Trace], beam_width: int, lengths: Sequence[int]
) -> dict[int, int]:
    """entry -> the earliest decoding step at which it takes the runner-up of a near-tie;
    ``lengths``: the prompts' token counts (the batch's shape)."""
    flips: dict[int, int] = {}
    for entry, prompt in enumerate(prompts):
        where = drift.placement(prompt, len(prompts), beam_width, max(lengths), sum(lengths))
        if where is None:
            continue
        step = traces[prompt].flip_step(where)
        if step is not None:
            flips[entry] = step
    return flips


def near_tie(best: float, runner_up: float, tokens: tuple[int, int], eos: int, margin: float) -> bool:
    """Two candidates (scores in nats, their tokens) close enough to flip; the end token never
    takes part (a flip to it would cut the output short, which is damage, not drift)."""
    return eos not in tokens and best - runner_up < margin


def check_drift(drift: Drift, option: str) -> Drift:
    """Reject a rate outside (0, 1] or a margin that is not positive."""
    if not 0.0 < drift.rate <= 1.0:
        raise ConfigError(
            f"{option}: rate {drift.rate} must be in (0, 1] (the share of sequences "
            "at batch size > 1 that take the runner-up of a near-tie)"
        )
    if not drift.margin > 0:
        raise ConfigError(f"{option}: margin {drift.margin} must be positive (nats)")
    return drift


def drift_from_config(section: Json, where: str) -> Drift | None:
    """The ``emulator.drift`` entry of config.json, or None for an engine without drift."""
    if section is None:
        return None
    if not isinstance(section, Mapping) or not isinstance(section.get("rate"), (int, float)):
        raise ConfigError(
            f"{where}: emulator.drift must be an object with a numeric rate; rebuild the engine"
        )
    known = set(Drift.__dataclass_fields__)
    try:
        drift = TypeAdapter(Drift).validate_python({k: v for k, v in section.items() if k in known})
    except ValidationError as exc:
        raise ConfigError(f"{where}: emulator.drift: {exc.errors()[0]['msg']}; rebuild the engine") from None
    return check_drift(drift, f"{where}: emulator.drift")
