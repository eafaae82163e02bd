"""Commands that read reports: ``compare`` (two runs, position by position) and ``merge`` (the
reports of ``--shard K/N`` runs as one); and ``options`` (every run option as a table)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config import find_option

if TYPE_CHECKING:
    from harness.commands.common import Subcommands


def add_compare(sub: Subcommands) -> None:
    p_cmp = sub.add_parser("compare", help="what changed between two runs' reports")
    p_cmp.add_argument("old", metavar="OLD", help="report folder or report.json")
    p_cmp.add_argument("new", metavar="NEW", help="report folder or report.json")
    p_cmp.add_argument(
        "--tolerance",
        type=find_option("tolerance").type or float,
        default=None,
        help="ROUGE-L change that counts (default: NEW's --tolerance)",
    )
    p_cmp.add_argument("--html", metavar="FILE", help="also write the comparison as a page")
    p_cmp.set_defaults(func=cmd_compare)


def add_options(sub: Subcommands) -> None:
    p_opts = sub.add_parser(
        "options", help="every run option (of run and pytest suites/) as a Markdown table"
    )
    p_opts.set_defaults(func=cmd_options)


def add_merge(sub: Subcommands) -> None:
    p_merge = sub.add_parser("merge", help="combine the reports of --shard K/N runs into one")
    p_merge.add_argument("reports", nargs="+", metavar="REPORT_DIR", help="the report folder of every shard")
    p_merge.add_argument(
        "--output",
        metavar="DIR",
        default=None,
        help="folder for the merged report (default: a new merged-<time> folder next to the first shard's)",
    )
    p_merge.set_defaults(func=cmd_merge)


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.model.vocab import Direction
    from harness.report.compare import compare
    from harness.report.html import render_compare
    from harness.report.serialize import load_report
    from harness.storage.atomic import atomic_write_text, disk_errors
    from harness.storage.folders import check_output_file

    html = check_output_file(Path(args.html), "--html") if args.html else None
    result = compare(load_report(args.old), load_report(args.new), tolerance=args.tolerance)
    for line in result.lines:
        print(line)
    if html is not None:
        with disk_errors(
            f"--html {html}", "the comparison above is complete; give a file on a disk with space"
        ):
            atomic_write_text(html, render_compare(result))
        print(f"page: {html}")
    print(f"verdict: {result.verdict} (new against old, tolerance {result.tolerance})")
    return 1 if result.verdict == Direction.WORSE else 0


def cmd_options(args: argparse.Namespace) -> int:
    from harness.tools.options_doc import table

    print(table(), end="")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from harness.model.vocab import Verdict
    from harness.report.files import write_files
    from harness.report.merge import default_output, merge, prepare_output
    from harness.report.summary import cell_lines
    from harness.storage.atomic import disk_errors

    report, rows = merge(args.reports)
    assert report.shard is not None and report.shard.merged_from
    first = Path(report.shard.merged_from[0])
    folder = prepare_output(Path(args.output) if args.output else default_output(first))
    with disk_errors(
        f"--output {folder}",
        "the shard reports are unchanged; free space or give another --output, and merge again",
    ):
        write_files(report, rows, folder)
    for line in cell_lines(report):
        print(line)
    print(f"merged {report.shard.count} shards; verdict: {report.verdict}  report: {folder}")
    return 0 if report.verdict == Verdict.PASS else 1
