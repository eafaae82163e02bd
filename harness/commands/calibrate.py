"""``calibrate``: the gate's measured false-alarm and detection rates (``harness.tools.calibrate``)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness.commands.common import add_run_options
from harness.config.option import declared
from harness.tools.calibrate.settings import SHARED, Settings

if TYPE_CHECKING:
    from harness.commands.common import Subcommands


def add(sub: Subcommands) -> None:
    """calibrate: its own options (declared on Settings) and the run's decision options it shares."""
    p_cal = sub.add_parser(
        "calibrate",
        help="measure false-alarm and detection rates on the emulator's fault models (docs/method.md)",
    )
    for spec in declared(Settings):
        p_cal.add_argument(spec.flag, **spec.argument(default=spec.default))
    add_run_options(
        p_cal,
        SHARED,
        defaults=True,
        helps={
            "seed": "seed for the rounds' shuffles and the trials (default {default})",
            "cache_dir": "generation cache folder (default: the run's cache folder)",
            "rotation": "the plan the trials analyse (full, the default, or sparse: each prompt at "
            "one position per cell, as with run --rotation sparse); the sweep models "
            "are always sparse, as --sweep is",
        },
    )
    p_cal.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from harness.tools.calibrate.run import run_calibration
    from harness.tools.calibrate.table import Targets, flight_table, table

    own = {spec.dest: getattr(args, spec.dest) for spec in declared(Settings)}
    # every run option calibrate shares (SHARED), as given; the cache as a folder or none
    shared = {name: getattr(args, name) for name in SHARED if name not in ("cache_dir", "no_cache")}
    settings = replace(
        Settings(**own),
        **shared,
        cache_dir=None if args.no_cache else Path(args.cache_dir).expanduser(),
    )
    outcomes, flights = run_calibration(settings, say=lambda line: print(line, flush=True))
    lines, ok = table(outcomes, settings, Targets()) if outcomes else ([], True)
    more, flights_ok = flight_table(flights, settings, Targets())
    print("\n".join([*lines, *([""] if lines and more else []), *more]))
    return 0 if ok and flights_ok else 1
