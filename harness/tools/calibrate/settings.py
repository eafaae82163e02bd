"""What ``calibrate`` is asked for: its own options, each declared once (as the run's are, with
``option``), and the run's decision options it shares (their declarations are RunConfig's).
Light to import: the CLI builds its parser from here without loading torch."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.bounds import Range
from harness.config import DesignOptions, RunConfig
from harness.config.option import option
from harness.config.parse import fraction, positive_int
from harness.model.vocab import Receiver, Rotation

SWEEP_TO = 8  # the sweep models' max_batch_size (--sweep-to)
JOBS = min(2, os.cpu_count() or 1)


def names(flag: str, bound: Range | None = None) -> Callable[[str], tuple[str, ...]]:
    """Comma-separated names (``--only``)."""

    def parse(value: str) -> tuple[str, ...]:
        return tuple(n.strip() for n in value.split(",") if n.strip())

    return parse


@dataclass(frozen=True)
class Settings:
    """What ``calibrate`` was asked for."""

    trials: int = option(
        200, "--trials", "trials per model (default {default})", Receiver.CALIBRATE, parse=positive_int
    )
    prompts: int = option(
        64,
        "--prompts",
        "prompts per trial (default {default}, the bundled dataset's size)",
        Receiver.CALIBRATE,
        parse=positive_int,
    )
    pool: int = option(
        96,
        "--pool",
        "generated prompts the trials draw from (default {default})",
        Receiver.CALIBRATE,
        parse=positive_int,
    )
    rounds: int = option(
        1,
        "--rounds",
        "rotation rounds per cell for drift, padding and stride (default {default}; each more adds about a third "
        "to the generation)",
        Receiver.CALIBRATE,
        parse=positive_int,
    )
    flight_rounds: int = option(
        4,
        "--flight-rounds",
        "rounds of every schedule per in-flight model, each a fresh draw of --prompts prompts in a fresh order "
        "(default {default}; a round takes a few seconds: rounds are never replayed from the cache)",
        Receiver.CALIBRATE,
        parse=positive_int,
        metavar="N",
    )
    jobs: int = option(
        JOBS,
        "--jobs",
        "worker processes for generation (default {default})",
        Receiver.CALIBRATE,
        parse=positive_int,
    )
    only: tuple[str, ...] = option(
        (),
        "--only",
        "comma-separated models: healthy, drift-0.1, drift-0.3, drift-0.6, overflow, full-batch, padding, stride "
        "(each also +drift), partial, partial+drift, truncate, late-loss; in flight (bulk cells and schedules): "
        "stale-slot, prefill-corrupt, warm-cache, inflight-graph (each also +drift, schedules only); swept to max_batch_size 8: graph-ladder, "
        "beam-buffer, slot-cut (each also +drift), sweep-drift-0.3 (default: every model)",
        Receiver.CALIBRATE,
        parse=names,
        metavar="NAMES",
    )
    sweep_to: int = option(
        SWEEP_TO,
        "--sweep-to",
        "max_batch_size the sweep models are built with and swept to (default {default}; needs --prompts >= 5 N)",
        Receiver.CALIBRATE,
        parse=positive_int,
        metavar="N",
    )
    horizon: float = option(
        1.0,
        "--horizon",
        "with --looks 1: decide each full-rotation model over only the first F of every cell's rotation "
        "batches, at the whole alpha: the most any look at F could find, whatever its stopping rule "
        "(default {default}: the whole rotation; see docs/method.md)",
        Receiver.CALIBRATE,
        parse=fraction,
        bound=Range(0.0, 1.0, "a share of the rotation", open_low=True),
        metavar="F",
    )
    # the run's options calibrate shares, with the run's defaults (declared on RunConfig)
    seed: int = RunConfig.seed
    max_new_tokens: int = RunConfig.max_new_tokens
    tolerance: float = RunConfig.tolerance
    alpha: float = RunConfig.alpha
    rotation: Rotation = RunConfig.rotation
    follow_up: float = DesignOptions.follow_up
    looks: int = DesignOptions.looks
    cache_dir: Path | None = None  # None: generate without the cache
    # the partial model: the share of prompts hit at its position
    fraction: float = 0.3
    position: int = 3
    work_dir: Path | None = None  # where the engines are built (default: the harness's cache)


SHARED = (
    "seed",
    "max_new_tokens",
    "tolerance",
    "alpha",
    "cache_dir",
    "no_cache",
    "rotation",
    "follow_up",
    "looks",
)
