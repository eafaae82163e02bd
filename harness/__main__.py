"""Command line: ``python -m harness {run,build-engine,lint,compare,serve,calibrate,bench,merge}``.

``run`` does what ``pytest suites/`` does, without pytest: exit 0 when every cell passes,
1 when a cell fails, 2 for bad input. ``lint`` exits 0 when the cell fits the engine, 1 when
it does not, 2 for an unreadable engine directory. ``compare`` exits 1 when NEW is worse
than OLD beyond the tolerance. ``bench`` times a run against the engine's own generate
time. ``merge`` combines ``--shard K/N`` reports into the unsharded report (exit as ``run``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable

from harness.commands import calibrate, engines, reports, run
from harness.errors import HarnessError, exit_status, interrupted
from harness.outside import terminal
from harness.stop_signals import stop_signals

# in the order ``--help`` lists them
SUBCOMMANDS = (
    run.add,
    engines.add_build_engine,
    engines.add_lint,
    reports.add_compare,
    calibrate.add,
    engines.add_serve,
    reports.add_options,
    run.add_bench,
    reports.add_merge,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    # everything this command prints, argparse's errors included, leaves through one gate:
    # secrets redacted, control characters escaped (harness.outside)
    with terminal():
        args = parser.parse_args(argv)
        command: Callable[[argparse.Namespace], int] = args.func
        try:
            with stop_signals() if getattr(args, "stoppable", False) else contextlib.nullcontext():
                return command(args)
        except HarnessError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: what was kept, how to resume
            print(interrupted(exc), file=sys.stderr)
            return exit_status(exc)


if __name__ == "__main__":
    code = main()
    # Interpreter exit would walk every object torch and friends created (about 0.5 s on the
    # 2-core machine, docs/performance.md); frozen objects are skipped. Nothing is left to run.
    import gc

    gc.freeze()
    sys.exit(code)
