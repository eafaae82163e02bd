"""``calibrate``: the gate's measured false-alarm and detection rates (``harness.tools.calibrate``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from harness.commands.common import add_run_options
from harness.config import RunConfig, positive_int

if TYPE_CHECKING:
    from harness.commands.common import Subcommands


def add(sub: Subcommands) -> None:
    """calibrate: the run's decision options, plus the trials'."""
    p_cal = sub.add_parser(
        "calibrate",
        help="measure false-alarm and detection rates on the emulator's fault models (docs/method.md)",
    )
    p_cal.add_argument("--trials", type=positive_int("--trials"), default=200)
    p_cal.add_argument(
        "--prompts",
        type=positive_int("--prompts"),
        default=64,
        help="prompts per trial (the default dataset size)",
    )
    # the defaults of harness.tools.calibrate.Settings (not imported here: it loads torch)
    p_cal.add_argument(
        "--pool",
        type=positive_int("--pool"),
        default=96,
        help="generated prompts the trials draw from (default 96)",
    )
    p_cal.add_argument(
        "--rounds",
        type=positive_int("--rounds"),
        default=1,
        help="rotation rounds per cell for drift, padding and stride (default 1; "
        "each more adds about a third to the generation)",
    )
    p_cal.add_argument(
        "--jobs",
        type=positive_int("--jobs"),
        default=min(2, os.cpu_count() or 1),
        help="worker processes for generation",
    )
    p_cal.add_argument(
        "--only",
        default=None,
        metavar="NAMES",
        help="comma-separated models: healthy, drift-0.1, drift-0.3, drift-0.6, "
        "overflow, full-batch, padding, stride (each also +drift), partial, "
        "partial+drift, truncate; swept to max_batch_size 8: graph-ladder, "
        "beam-buffer (each also +drift), sweep-drift-0.3",
    )
    p_cal.add_argument(
        "--sweep-to",
        type=positive_int("--sweep-to"),
        default=8,
        metavar="N",
        help="max_batch_size the sweep models are built with and swept to "
        "(default 8; needs --prompts >= 5 N)",
    )
    add_run_options(
        p_cal,
        ("seed", "max_new_tokens", "tolerance", "alpha", "cache_dir", "no_cache", "rotation"),
        defaults=True,
        helps={
            "seed": f"seed for the rounds' shuffles and the trials (default {RunConfig.seed})",
            "cache_dir": "generation cache folder (default: the run's cache folder)",
            "rotation": "the plan the trials analyse (full, the default, or sparse: each prompt at "
            "one position per cell, as with run --rotation sparse); the sweep models "
            "are always sparse, as --sweep is",
        },
    )
    p_cal.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from harness.tools.calibrate import Settings, Targets, run_calibration, table

    settings = Settings(
        trials=args.trials,
        seed=args.seed,
        prompts=args.prompts,
        pool=args.pool,
        rounds=args.rounds,
        max_new_tokens=args.max_new_tokens,
        tolerance=args.tolerance,
        alpha=args.alpha,
        jobs=args.jobs,
        cache_dir=None if args.no_cache else Path(args.cache_dir).expanduser(),
        only=tuple(args.only.split(",")) if args.only else (),
        rotation=args.rotation,
        sweep_to=args.sweep_to,
    )
    outcomes = run_calibration(settings, say=lambda line: print(line, flush=True))
    lines, ok = table(outcomes, settings, Targets())
    print("\n".join(lines))
    return 0 if ok else 1
