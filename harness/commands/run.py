"""``run`` (the suite without pytest, or ``--dry-run``: the plan and limits without loading the
engine) and ``bench`` (a run timed against the engine's own generate time)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.commands.common import add_run_options, progress
from harness.config import OPTIONS, RunConfig

if TYPE_CHECKING:
    from harness.commands.common import Subcommands

_IMPORTED = time.perf_counter()  # bench's fallback start where /proc cannot say when the process began


def add(sub: Subcommands) -> None:
    """``run`` and ``bench``: both take every run option; SIGTERM/SIGHUP end them as Ctrl-C does."""
    p_run = sub.add_parser("run", help="run the batch-position suite without pytest")
    add_run_options(p_run)
    p_run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan, the tokens it may generate, the build-limit checks "
        "and (with --throughput) an estimate of its time, without loading "
        "the engine or generating; exit 1 when a cell exceeds a build limit",
    )
    p_run.set_defaults(func=cmd_run, stoppable=True)


def add_bench(sub: Subcommands) -> None:
    p_bench = sub.add_parser("bench", help="time a run (no cache) against the engine's own generate time")
    add_run_options(p_bench)
    p_bench.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p_bench.set_defaults(func=cmd_bench, stoppable=True)


def cmd_run(args: argparse.Namespace) -> int:
    from harness.model.vocab import Verdict
    from harness.pipeline import execute, prepare
    from harness.report.summary import (
        cell_lines,
        finding_lines,
        footer_lines,
        header_lines,
        legend,
        schedule_lines,
    )
    from harness.stages.run import FollowerRun
    from harness.stages.schedules import schedules_line
    from harness.verdict.failures import preflight_line

    values = {spec.dest: getattr(args, spec.dest) for spec in OPTIONS}
    config = RunConfig.from_options(values, root=Path.cwd())
    if args.dry_run:
        return dry_run(config)
    prepared = prepare(config)
    print(prepared.plan.describe(), flush=True)
    scheduled = schedules_line(prepared.config, prepared.plan)
    if scheduled:
        print(scheduled, flush=True)
    warning = preflight_line(prepared.limit_failures(), "the findings at the end name them")
    if warning:
        print(warning, flush=True)
    result = execute(prepared, progress=progress)
    if isinstance(result, FollowerRun):  # under MPI, rank 0's exit status is the verdict
        print(result.message)
        return 0
    report = result.report
    for line in [
        *header_lines(report),
        legend(report),
        *cell_lines(report),
        *schedule_lines(report),
        *finding_lines(report),
        *footer_lines(report, result.folder),
    ]:
        print(line)
    return 0 if report.verdict == Verdict.PASS else 1


def dry_run(config: RunConfig) -> int:
    """--dry-run: the plan, what it may generate, the build-limit checks and an estimate of the
    time, from the options, config.json, the dataset and the tokenizer files; nothing loads or
    generates. Exit 1 when a cell exceeds a build limit."""
    from harness.report.estimate import estimate_line
    from harness.stages.plan_only import plan_only

    planned = plan_only(config)
    for line in [
        *planned.cost_lines(),
        *planned.limit_lines(),
        estimate_line(config, planned.plan.sequences()),
    ]:
        print(line)
    return 1 if planned.limit_failures else 0


def _since_process_start() -> float:
    """Seconds since this process started (Linux /proc), else since this module was imported."""
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rpartition(")")[2].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        return max(age, now - _IMPORTED)
    except (OSError, ValueError, IndexError):
        return now - _IMPORTED


def cmd_bench(args: argparse.Namespace) -> int:
    import json
    import tempfile

    from harness.pipeline import run
    from harness.stages.run import FollowerRun

    values = {spec.dest: getattr(args, spec.dest) for spec in OPTIONS}
    values["no_cache"] = True  # the engine must really generate
    if values["report_dir"] is None:
        values["report_dir"] = tempfile.mkdtemp(prefix="harness-bench-")
    config = RunConfig.from_options(values, root=Path.cwd())
    t_run = time.perf_counter()
    startup = _since_process_start()  # interpreter, imports and option parsing so far
    result = run(config, progress=progress)
    wall = startup + (time.perf_counter() - t_run)
    if isinstance(result, FollowerRun):  # under MPI rank 0 reports the figures
        print(result.message)
        return 0
    report = result.report
    timing = report.timing
    engine = timing.engine_generate_s
    breakdown = {
        "startup_s": round(startup, 3),  # process start -> run() called
        "prepare_s": round(timing.prepare_s, 4),  # dataset, engine load, preflight, goldens
        "engine_load_s": round(timing.engine_load_s, 4),  # (part of prepare_s)
        "engine_generate_s": round(engine, 3),
        "generate_stage_other_s": round(timing.generate_stage_s - engine, 3),
        "scoring_s": round(timing.scoring_s, 4),  # CPU time; overlapped with generation when True below
        "scoring_overlapped": timing.scoring_overlapped,
        "after_generation_s": round(timing.after_generation_s, 4),  # scoring left over + analysis
        # run() returned -> the report is written; harness_total_s ends where writing begins
        "report_s": round(wall - startup - timing.harness_total_s, 3),
    }
    cells = [c.id for c in report.cells]
    out = {
        "engine": report.engine.path,
        "backend": report.engine.backend,
        "cells": cells,
        "sequences": report.method.sequences,
        "engine_calls": timing.engine_calls,
        "engine_generate_s": round(engine, 3),
        "harness_wall_s": round(wall, 3),
        "ratio": round(wall / engine, 4) if engine > 0 else None,
        "target_ratio": 1.10,
        "breakdown": breakdown,
        "report_dir": str(result.folder),
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"engine {out['engine']} ({out['backend']}), {len(cells)} cells, "
        f"{out['sequences']} sequences, {out['engine_calls']} engine calls"
    )
    print(f"engine generate time: {engine:.2f} s")
    print(f"harness wall time:    {wall:.2f} s (process start to report written)")
    ratio = f"{wall / engine:.3f}" if engine > 0 else "n/a (the engine generated nothing)"
    print(f"ratio:                {ratio} (target <= 1.10)")
    print(
        "where the rest goes: "
        + ", ".join(f"{k} {v}" for k, v in breakdown.items() if k != "engine_generate_s")
    )
    print(f"report: {result.folder}")
    return 0
