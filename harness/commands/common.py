"""What the commands share: the run options on a subcommand (declared once, in
``harness.config``) and how a command shows progress."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from harness.config import OPTIONS, RunConfig, find_option

if TYPE_CHECKING:
    from harness.progress import Progress

    # what add_subparsers returns: typeshed names the class argparse keeps private
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


def add_run_options(
    parser: argparse.ArgumentParser,
    dests: tuple[str, ...] | None = None,
    *,
    defaults: bool = False,
    helps: dict[str, str] | None = None,
) -> None:
    """The run options (those in ``dests``, else all) with their parsers and ranges. Without
    ``defaults`` an option not given is None and RunConfig applies its default; with it, the
    parsed arguments hold RunConfig's defaults (for commands that read them directly)."""
    given = RunConfig() if defaults else None
    for spec in OPTIONS if dests is None else [find_option(d) for d in dests]:
        shown = replace(spec, help=helps[spec.dest]) if helps and spec.dest in helps else spec
        parser.add_argument(
            spec.flag, **shown.argument(default=given.value(spec) if given is not None else None)
        )


def progress(total: int) -> Progress:
    """A bar on a terminal; a line at a steady interval in a log (stderr piped)."""
    from harness.progress import progress_factory

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return progress_factory(say, terminal=sys.stderr.isatty())(total)
