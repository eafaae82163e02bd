"""Commands about one engine: ``build-engine`` (an emulator engine directory), ``lint`` (one
cell against an engine's config.json) and ``serve`` (an engine behind an OpenAI-compatible
server on loopback)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness.bounds import BATCH_SIZE, BEAM_WIDTH, MAX_BATCH_SIZE, MAX_BEAM_WIDTH, PORT, SEQUENCE, Range
from harness.commands.common import add_run_options
from harness.config import RunConfig, non_negative_int, non_negative_real, positive_int
from harness.config.basics import BUNDLED
from harness.engines.emulator import DEFAULT_COMPUTE_DTYPE

if TYPE_CHECKING:
    from harness.commands.common import Subcommands

# the run options a cell's check depends on: the prompts' lengths, the tokens generated, the GPU
LINT_OPTIONS = (
    "max_new_tokens",
    "gpu_memory",
    "dataset",
    "dataset_config",
    "split",
    "text_field",
    "summary_field",
    "prompt_template",
)
# build-engine writes these; the harness reads no larger ones back
BUILT_BATCH = Range(None, MAX_BATCH_SIZE, "the largest max_batch_size the harness reads")
BUILT_BEAM = Range(None, MAX_BEAM_WIDTH, "the largest max_beam_width the harness reads")


def add_build_engine(sub: Subcommands) -> None:
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
        "partial[:position=,fraction=,seed=], truncate[:keep=], graph-ladder, beam-buffer, "
        "late-loss[:fraction=,loss=,seed=], slot-cut[:batch=,position=,keep=], the in-flight-only "
        "stale-slot, prefill-corrupt, warm-cache, inflight-graph, or "
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


def add_lint(sub: Subcommands) -> None:
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
    add_run_options(p_lint, LINT_OPTIONS)
    p_lint.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p_lint.set_defaults(func=cmd_lint)


def cmd_lint(args: argparse.Namespace) -> int:
    import json

    from harness.model.vocab import Verdict
    from harness.tools.lint import format_text, lint

    config = RunConfig.from_options({dest: getattr(args, dest) for dest in LINT_OPTIONS}, root=Path.cwd())
    result = lint(
        args.engine_dir,
        batch_size=args.batch_size,
        num_beams=args.num_beams,
        tokenizer=args.tokenizer,
        config=config,
    )
    print(json.dumps(result.as_dict(), indent=2) if args.json else format_text(result))
    return 0 if result.verdict == Verdict.PASS else 1


def add_serve(sub: Subcommands) -> None:
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
