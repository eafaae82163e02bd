"""Command line: ``python -m harness {run,build-engine,lint,compare}``.

``run`` does what ``pytest suites/`` does, without pytest: exit 0 when every cell passes,
1 when a cell fails, 2 for bad input. ``lint`` exits 0 when the cell fits the engine, 1 when
it does not, 2 for an unreadable engine directory. ``compare`` exits 1 when NEW is worse
than OLD beyond the tolerance.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.config import (
    DEFAULT_PROMPT_TEMPLATE,
    OPTIONS,
    RunConfig,
    fraction,
    positive_int,
    size,
)
from harness.errors import HarnessError


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    for spec in OPTIONS:
        kwargs = {"dest": spec.dest, "help": spec.help}
        if spec.action:
            kwargs["action"] = spec.action
        else:
            kwargs.update(type=spec.type or str, metavar=spec.metavar)
        parser.add_argument(spec.flag, **kwargs)


def _progress(total: int):
    from tqdm import tqdm

    bar = tqdm(total=total, unit="seq", desc="generating", disable=not sys.stderr.isatty(),
               leave=False)
    return bar.update


def cmd_run(args: argparse.Namespace) -> int:
    from harness.pipeline import FollowerRun, run, summary_lines

    values = {spec.dest: getattr(args, spec.dest) for spec in OPTIONS}
    config = RunConfig.from_options(values, root=Path.cwd())
    result = run(config, progress=_progress)
    if isinstance(result, FollowerRun):  # under MPI, rank 0's exit status is the verdict
        print(result.message)
        return 0
    for line in summary_lines(result):
        print(line)
    for c in result.cells:
        for check in c.limit_failures:
            print(f"{c.cell.id}: build limit: {check.message}")
        if c.analysis and c.analysis.degraded_positions:
            print(c.analysis.message)
    print(f"verdict: {result.verdict}  report: {result.report_dir}")
    return 0 if result.verdict == "pass" else 1


def cmd_build_engine(args: argparse.Namespace) -> int:
    from harness.engines.emulator.build import BuildLimits, build_engine

    limits = BuildLimits(max_batch_size=args.max_batch_size, max_beam_width=args.max_beam_width,
                         max_input_len=args.max_input_len, max_seq_len=args.max_seq_len)
    path = build_engine(Path(args.output), limits, model_dir=args.model,
                        compute_dtype=args.compute_dtype)
    print(f"built emulator engine {path} (max_batch_size {limits.max_batch_size}, max_beam_width "
          f"{limits.max_beam_width}, max_input_len {limits.max_input_len}, max_seq_len "
          f"{limits.max_seq_len})")
    return 0


def cmd_lint(args: argparse.Namespace) -> int:
    import json

    from harness.lint import format_text, lint

    result = lint(args.engine_dir, batch_size=args.batch_size, num_beams=args.num_beams,
                  max_new_tokens=args.max_new_tokens, gpu=args.gpu_memory,
                  tokenizer=args.tokenizer, dataset=args.dataset, text_field=args.text_field,
                  summary_field=args.summary_field, prompt_template=args.prompt_template,
                  dataset_config=args.dataset_config, split=args.split)
    print(json.dumps(result.as_dict(), indent=2) if args.json else format_text(result))
    return 0 if result.verdict == "pass" else 1


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.goldens import atomic_write_text
    from harness.report.compare import compare, load_report
    from harness.report.html import render_compare

    result = compare(load_report(args.old), load_report(args.new), tolerance=args.tolerance)
    for line in result["lines"]:
        print(line)
    if args.html:
        atomic_write_text(Path(args.html), render_compare(result))
        print(f"page: {args.html}")
    print(f"verdict: {result['verdict']} (new against old, tolerance {result['tolerance']})")
    return 1 if result["verdict"] == "worse" else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p_run = sub.add_parser("run", help="run the batch-position suite without pytest")
    _add_run_options(p_run)
    p_run.set_defaults(func=cmd_run)

    p_build = sub.add_parser("build-engine", help="build an emulator engine directory")
    p_build.add_argument("--output", required=True, metavar="DIR")
    p_build.add_argument("--max-batch-size", type=positive_int("--max-batch-size"), default=8)
    p_build.add_argument("--max-beam-width", type=positive_int("--max-beam-width"), default=1)
    p_build.add_argument("--max-input-len", type=positive_int("--max-input-len"), default=384)
    p_build.add_argument("--max-seq-len", type=positive_int("--max-seq-len"), default=512)
    p_build.add_argument("--model", type=Path, default=None, metavar="DIR",
                         help="transformers Mistral model directory (default: the bundled model)")
    p_build.add_argument("--compute-dtype", choices=("float64", "float32"), default="float64")
    p_build.set_defaults(func=cmd_build_engine)

    p_lint = sub.add_parser("lint", help="check an engine's build limits and KV-cache memory")
    p_lint.add_argument("engine_dir", metavar="ENGINE_DIR")
    p_lint.add_argument("--batch-size", type=positive_int("--batch-size"), default=None,
                        help="batch size to check (default: the engine's max_batch_size)")
    p_lint.add_argument("--num-beams", type=positive_int("--num-beams"), default=1)
    p_lint.add_argument("--max-new-tokens", type=positive_int("--max-new-tokens"), default=64)
    p_lint.add_argument("--gpu-memory", type=size("--gpu-memory"), default=None, metavar="SIZE",
                        help="GPU memory, e.g. 80GiB (default: read from the GPU, else 80GiB)")
    p_lint.add_argument("--tokenizer", default=None, metavar="DIR",
                        help="tokenizer for prompt lengths (emulator engines carry their own)")
    p_lint.add_argument("--dataset", default=None, metavar="PATH")
    p_lint.add_argument("--dataset-config", default=None, metavar="NAME")
    p_lint.add_argument("--split", default=None, metavar="NAME")
    p_lint.add_argument("--text-field", default=None, help="default: the preset's, else text")
    p_lint.add_argument("--summary-field", default=None,
                        help="default: the preset's, else summary")
    p_lint.add_argument("--prompt-template", default=DEFAULT_PROMPT_TEMPLATE)
    p_lint.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p_lint.set_defaults(func=cmd_lint)

    p_cmp = sub.add_parser("compare", help="what changed between two runs' reports")
    p_cmp.add_argument("old", metavar="OLD", help="report folder or report.json")
    p_cmp.add_argument("new", metavar="NEW", help="report folder or report.json")
    p_cmp.add_argument("--tolerance", type=fraction("--tolerance", low=0.0, high=1.0), default=None,
                       help="ROUGE-L change that counts (default: NEW's --tolerance)")
    p_cmp.add_argument("--html", metavar="FILE", help="also write the comparison as a page")
    p_cmp.set_defaults(func=cmd_compare)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
