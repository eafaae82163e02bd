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
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness.bounds import BATCH_SIZE, BEAM_WIDTH, MAX_BATCH_SIZE, MAX_BEAM_WIDTH, PORT, SEQUENCE, Range
from harness.config import (
    BUNDLED,
    OPTIONS,
    RunConfig,
    find_option,
    non_negative_int,
    non_negative_real,
    positive_int,
)
from harness.engines.emulator import DEFAULT_COMPUTE_DTYPE
from harness.errors import HarnessError, exit_status, interrupted
from harness.outside import terminal
from harness.stop_signals import stop_signals

if TYPE_CHECKING:
    # what add_subparsers returns: typeshed names the class argparse keeps private
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]
    from harness.progress import Progress

# build-engine writes these; the harness reads no larger ones back
BUILT_BATCH = Range(None, MAX_BATCH_SIZE, "the largest max_batch_size the harness reads")
BUILT_BEAM = Range(None, MAX_BEAM_WIDTH, "the largest max_beam_width the harness reads")
_IMPORTED = time.perf_counter()  # bench's fallback start where /proc cannot say when the process began


def _add_run_options(
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
        kwargs = spec.argument(default=given.value(spec) if given is not None else None)
        if helps and spec.dest in helps:
            kwargs["help"] = helps[spec.dest]
        parser.add_argument(spec.flag, **kwargs)


def _progress(total: int) -> Progress:
    """A bar on a terminal; a line at a steady interval in a log (stderr piped)."""
    from harness.progress import progress_factory

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return progress_factory(say, terminal=sys.stderr.isatty())(total)


def cmd_run(args: argparse.Namespace) -> int:
    from harness.model.vocab import Verdict
    from harness.pipeline import execute, prepare
    from harness.report.summary import (
        cell_lines,
        finding_lines,
        footer_lines,
        header_lines,
        legend,
    )
    from harness.stages.run import FollowerRun
    from harness.verdict.failures import preflight_line

    values = {spec.dest: getattr(args, spec.dest) for spec in OPTIONS}
    config = RunConfig.from_options(values, root=Path.cwd())
    if args.dry_run:
        return dry_run(config)
    prepared = prepare(config)
    print(prepared.plan.describe(), flush=True)
    warning = preflight_line(prepared.limit_failures(), "the findings at the end name them")
    if warning:
        print(warning, flush=True)
    result = execute(prepared, progress=_progress)
    if isinstance(result, FollowerRun):  # under MPI, rank 0's exit status is the verdict
        print(result.message)
        return 0
    report = result.report
    for line in [
        *header_lines(report),
        legend(report),
        *cell_lines(report),
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


def cmd_build_engine(args: argparse.Namespace) -> int:
    from harness.engines.emulator.build import build_engine, build_limits
    from harness.engines.emulator.faults import parse_drift, parse_fault, split_fault

    limits = build_limits(
        max_batch_size=args.max_batch_size,
        max_beam_width=args.max_beam_width,
        max_input_len=args.max_input_len,
        max_seq_len=args.max_seq_len,
    )
    fault = parse_fault(args.fault, max_batch_size=args.max_batch_size) if args.fault else None
    fault, drift = split_fault(fault, parse_drift(args.drift) if args.drift else None)
    path = build_engine(
        Path(args.output),
        limits,
        model_dir=args.model,
        compute_dtype=args.compute_dtype,
        fault=fault,
        drift=drift,
    )
    what = [x.describe() for x in (fault, drift) if x is not None]
    print(
        f"built emulator engine {path} (max_batch_size {limits.max_batch_size}, max_beam_width "
        f"{limits.max_beam_width}, max_input_len {limits.max_input_len}, max_seq_len "
        f"{limits.max_seq_len}" + (f"; fault: {' + '.join(what)}" if what else "") + ")"
    )
    return 0


def cmd_lint(args: argparse.Namespace) -> int:
    import json

    from harness.model.vocab import Verdict
    from harness.tools.lint import format_text, lint

    result = lint(
        args.engine_dir,
        batch_size=args.batch_size,
        num_beams=args.num_beams,
        max_new_tokens=args.max_new_tokens,
        gpu=args.gpu_memory,
        tokenizer=args.tokenizer,
        dataset=args.dataset,
        text_field=args.text_field,
        summary_field=args.summary_field,
        prompt_template=args.prompt_template,
        dataset_config=args.dataset_config,
        split=args.split,
    )
    print(json.dumps(result.as_dict(), indent=2) if args.json else format_text(result))
    return 0 if result.verdict == Verdict.PASS else 1


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


def cmd_serve(args: argparse.Namespace) -> int:
    from harness.tools.serve import serve

    return serve(
        args.engine,
        backend=args.backend,
        host=args.host,
        port=args.port,
        max_batch_size=args.max_batch_size,
        window_ms=args.batch_window_ms,
        model_name=args.model_name,
        quiet=not args.verbose,
    )


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
    result = run(config, progress=_progress)
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


def _add_build_engine(sub: Subcommands) -> None:
    """build-engine: an emulator engine directory, with the fault and drift to build in."""
    p_build = sub.add_parser("build-engine", help="build an emulator engine directory")
    p_build.add_argument("--output", required=True, metavar="DIR")
    p_build.add_argument("--max-batch-size", type=positive_int("--max-batch-size", BUILT_BATCH), default=8)
    p_build.add_argument("--max-beam-width", type=positive_int("--max-beam-width", BUILT_BEAM), default=1)
    p_build.add_argument("--max-input-len", type=positive_int("--max-input-len", SEQUENCE), default=384)
    p_build.add_argument("--max-seq-len", type=positive_int("--max-seq-len", SEQUENCE), default=512)
    p_build.add_argument(
        "--model",
        type=Path,
        default=None,
        metavar="DIR",
        help="transformers Mistral model directory (default: the bundled model)",
    )
    p_build.add_argument(
        "--compute-dtype",
        choices=("float32", "float64"),
        default=DEFAULT_COMPUTE_DTYPE,
        help=f"the emulator's arithmetic (default {DEFAULT_COMPUTE_DTYPE})",
    )
    p_build.add_argument(
        "--fault",
        default=None,
        metavar="KIND[:k=v,...]",
        help="build a faulty engine: full-batch[:slot=], padding, stride, "
        "partial[:position=,fraction=,seed=], truncate[:keep=], or "
        "drift[:rate=,seed=] for drift alone (see docs/method.md)",
    )
    p_build.add_argument(
        "--drift",
        default=None,
        metavar="RATE[:seed=S]",
        help="benign batch-shape drift on top of any fault: the share of "
        "sequences at batch size > 1 that take the runner-up of a "
        "near-tie (with greedy decoding, the share of outputs that "
        "differ from batch size 1), e.g. 0.3 or 0.6:seed=2",
    )
    p_build.set_defaults(func=cmd_build_engine)


def _add_lint(sub: Subcommands) -> None:
    """lint: one cell against an engine's config.json."""
    p_lint = sub.add_parser("lint", help="check an engine's build limits and KV-cache memory")
    p_lint.add_argument("engine_dir", metavar="ENGINE_DIR")
    p_lint.add_argument(
        "--batch-size",
        type=positive_int("--batch-size", BATCH_SIZE),
        default=None,
        help="batch size to check (default: the engine's max_batch_size)",
    )
    p_lint.add_argument("--num-beams", type=positive_int("--num-beams", BEAM_WIDTH), default=1)
    p_lint.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="tokenizer for prompt lengths (emulator engines carry their own)",
    )
    _add_run_options(
        p_lint,
        (
            "max_new_tokens",
            "gpu_memory",
            "dataset",
            "dataset_config",
            "split",
            "text_field",
            "summary_field",
            "prompt_template",
        ),
        defaults=True,
    )
    p_lint.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p_lint.set_defaults(func=cmd_lint)


def _add_calibrate(sub: Subcommands) -> None:
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
    _add_run_options(
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


def _add_serve(sub: Subcommands) -> None:
    """serve: an engine on loopback."""
    p_serve = sub.add_parser(
        "serve",
        help="serve an emulator or hf engine through an OpenAI-compatible /v1/completions on loopback",
    )
    p_serve.add_argument(
        "--engine",
        default=BUNDLED,
        metavar="DIR",
        help="engine or hf model directory (default: the bundled engine)",
    )
    p_serve.add_argument(
        "--backend", default=None, metavar="NAME", help="emulator, hf or module:Class (default: detected)"
    )
    p_serve.add_argument(
        "--port",
        required=True,
        type=non_negative_int("--port", PORT),
        help="port to listen on (0: any free port; the ready line names it)",
    )
    p_serve.add_argument("--host", default="127.0.0.1", help="loopback address (default 127.0.0.1)")
    p_serve.add_argument(
        "--max-batch-size",
        type=positive_int("--max-batch-size", BATCH_SIZE),
        default=None,
        metavar="N",
        help="largest engine batch (default: the engine's max_batch_size, else 8)",
    )
    p_serve.add_argument(
        "--batch-window-ms",
        type=non_negative_real("--batch-window-ms"),
        default=100.0,
        metavar="MS",
        help="how long the first request of a batch waits for others with the same settings (default 100)",
    )
    p_serve.add_argument(
        "--model-name",
        default=None,
        metavar="NAME",
        help="model id in /v1/models (default: the engine directory's name)",
    )
    p_serve.add_argument("--verbose", action="store_true", help="log every request")
    p_serve.set_defaults(func=cmd_serve)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p_run = sub.add_parser("run", help="run the batch-position suite without pytest")
    _add_run_options(p_run)
    p_run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan, the tokens it may generate, the build-limit checks "
        "and (with --throughput) an estimate of its time, without loading "
        "the engine or generating; exit 1 when a cell exceeds a build limit",
    )
    p_run.set_defaults(func=cmd_run, stoppable=True)  # SIGTERM/SIGHUP end it as Ctrl-C does

    _add_build_engine(sub)
    _add_lint(sub)

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

    _add_calibrate(sub)
    _add_serve(sub)

    p_opts = sub.add_parser(
        "options", help="every run option (of run and pytest suites/) as a Markdown table"
    )
    p_opts.set_defaults(func=cmd_options)

    p_bench = sub.add_parser("bench", help="time a run (no cache) against the engine's own generate time")
    _add_run_options(p_bench)
    p_bench.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p_bench.set_defaults(func=cmd_bench, stoppable=True)

    p_merge = sub.add_parser("merge", help="combine the reports of --shard K/N runs into one")
    p_merge.add_argument("reports", nargs="+", metavar="REPORT_DIR", help="the report folder of every shard")
    p_merge.add_argument(
        "--output",
        metavar="DIR",
        default=None,
        help="folder for the merged report (default: a new merged-<time> folder next to the first shard's)",
    )
    p_merge.set_defaults(func=cmd_merge)

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
