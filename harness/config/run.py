"""RunConfig: every run option, declared once, parsed and cross-checked once.

The pytest plugin and the CLI hand the option values they parsed to ``RunConfig.from_options``;
every later stage reads only the frozen dataclass (the backend the ``EngineOptions`` group it
holds, the dataset loader its ``DatasetOptions``, each request its ``DecodingSettings``).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.bounds import (
    BATCH_SIZE,
    BEAM_WIDTH,
    DAY_S,
    MAX_LENGTH_PENALTY,
    MAX_NEW_TOKENS,
    Range,
)
from harness.config.basics import (
    BUNDLED,
    CACHE_FOLDER,
    DEFAULT_BATCH_SIZES,
    DEFAULT_BEAM_WIDTHS,
    DEFAULT_PROMPT_TEMPLATE,
    GENERATIONS_FOLDER,
    generations_folder,
    is_url,
)
from harness.config.dataset import DatasetOptions
from harness.config.decoding import DecodingSettings
from harness.config.design import DesignOptions
from harness.config.engine import EngineOptions
from harness.config.option import Option, declared, group, groups, option, path_option
from harness.config.parse import (
    RESERVED_FIELDS,
    Json,
    RequestFields,
    check_template,
    choice,
    fraction,
    merge_request_fields,
    non_negative_int,
    positive_int,
    positive_int_list,
    positive_real,
    real,
    request_field,
    shard,
    size,
    template,
)
from harness.config.schedule import ScheduleOptions
from harness.errors import ConfigError
from harness.model.vocab import Backend, Receiver, Rotation
from harness.redact import redact_url


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, validated; built once per session."""

    engine: str = option(
        BUNDLED,
        "--engine",
        "engine directory (emulator or TensorRT-LLM), hf model directory, module:Class or a server's "
        "http://HOST:PORT/v1 (default: the bundled emulator engine)",
        Receiver.ENGINE,
        metavar="DIR",
    )
    backend: str | None = option(
        None,
        "--backend",
        "emulator, hf, trtllm, llmapi, openai or module:Class (default: detected from the engine)",
        Receiver.ENGINE,
        metavar="NAME",
    )
    batch_sizes: tuple[int, ...] | None = option(
        None,
        "--batch-sizes",
        "comma-separated batch sizes and ranges, e.g. 1-16 or 1-8,16,32 (default "
        f"{','.join(map(str, DEFAULT_BATCH_SIZES))}, capped at the engine's max_batch_size)",
        Receiver.PLAN,
        parse=positive_int_list,
        bound=BATCH_SIZE,
        metavar="LIST",
    )
    sweep: bool = option(
        False,
        "--sweep",
        "every batch size from 1 to the engine's max_batch_size (config.json), each prompt once per size "
        "(--rotation sparse): names, per beam width, the batch size from which cells fail (report.json "
        "boundaries); cost and detection in docs/method.md",
        Receiver.PLAN,
    )
    beam_widths: tuple[int, ...] = option(
        DEFAULT_BEAM_WIDTHS,
        "--beam-widths",
        "comma-separated beam widths (default {default})",
        Receiver.PLAN,
        parse=positive_int_list,
        bound=BEAM_WIDTH,
        metavar="LIST",
    )
    max_new_tokens: int = option(
        64,
        "--max-new-tokens",
        "tokens generated per prompt (default {default})",
        Receiver.DECODING,
        parse=positive_int,
        bound=Range(None, MAX_NEW_TOKENS, "what is scored is a multiple of it"),
        metavar="N",
    )
    length_penalty: float = option(
        1.0,
        "--length-penalty",
        "beam-search length penalty (default {default})",
        Receiver.DECODING,
        parse=real,
        bound=Range(-MAX_LENGTH_PENALTY, MAX_LENGTH_PENALTY, "beam search raises lengths to this power"),
        metavar="X",
    )
    tolerance: float = option(
        0.02,
        "--tolerance",
        "ROUGE-L drop that counts as a regression: a position below the other positions of its batch, or "
        "quality against the references below batch size 1's (default {default})",
        Receiver.VERDICT,
        parse=fraction,
        bound=Range(0.0, 1.0),
        metavar="X",
    )
    alpha: float = option(
        0.01,
        "--alpha",
        "significance level of each test after Holm's correction over every test of the run (default {default})",
        Receiver.VERDICT,
        parse=fraction,
        bound=Range(0.0, 0.5, open_low=True),
        metavar="P",
    )
    deterministic: bool = option(
        False,
        "--deterministic",
        "also fail every position where an output differs from batch size 1's, for batch-invariant engines "
        "(vLLM's batch-invariant mode, SGLang's deterministic inference); off: differing outputs are reported, "
        "and fail only when they lose quality or depend on the position",
        Receiver.VERDICT,
    )
    prompt_template: str = option(
        DEFAULT_PROMPT_TEMPLATE,
        "--prompt-template",
        "prompt built from each document; must contain {text} (default '{default}')",
        Receiver.DECODING,
        parse=template,
        metavar="TEMPLATE",
    )
    chat: bool = option(
        False,
        "--chat",
        "wrap each prompt in the engine tokenizer's chat template (as the user's message, with the generation "
        "prompt)",
        Receiver.DECODING,
    )
    gpu_memory: str | None = option(
        None,
        "--gpu-memory",
        "GPU memory for the KV-cache budget, e.g. 80GiB (default: read from the GPU, else 80GiB)",
        Receiver.PREFLIGHT,
        parse=size,
        metavar="SIZE",
    )
    seed: int = option(
        0,
        "--seed",
        "seed for the order of prompts in batches and the --num-prompts subset (default {default})",
        Receiver.PLAN,
        parse=non_negative_int,
        metavar="N",
    )
    report_dir: Path = option(
        Path("reports"),
        "--report-dir",
        "folder under which each run writes a new report folder (default {default}/)",
        Receiver.STORAGE,
        metavar="DIR",
    )
    goldens_dir: Path = option(
        Path("goldens"),
        "--goldens-dir",
        "folder of goldens (default {default}/)",
        Receiver.STORAGE,
        metavar="DIR",
    )
    cache_dir: Path = path_option(
        generations_folder,
        "--cache-dir",
        f"generation cache folder (default ~/.cache/{CACHE_FOLDER}/{GENERATIONS_FOLDER}; $XDG_CACHE_HOME for "
        "~/.cache when set)",
        Receiver.STORAGE,
        metavar="DIR",
    )
    no_cache: bool = option(
        False, "--no-cache", "neither read nor write the generation cache", Receiver.STORAGE
    )
    signoff_by: str | None = option(
        None, "--signoff-by", "name recorded in the report's sign-off block", Receiver.REPORT, metavar="NAME"
    )
    update_goldens: bool = option(
        False,
        "--update-goldens",
        "record goldens from this run (batch size 1 of the engine, or --golden-engine) and write them after a "
        "complete run",
        Receiver.STORAGE,
    )
    shard: tuple[int, int] | None = option(
        None,
        "--shard",
        "run only shard K of N of the cells (for CI matrices); combine the shard reports with "
        "`python -m harness merge`",
        Receiver.PLAN,
        parse=shard,
        metavar="K/N",
    )
    rotation: Rotation = option(
        Rotation.FULL,
        "--rotation",
        "full (default: every prompt at every position of every cell, N x B sequences per cell) or sparse (each "
        "prompt at one position per cell, N sequences per cell: B times cheaper, less sensitive; see "
        "docs/method.md)",
        Receiver.PLAN,
        parse=choice(Rotation),
        metavar="{full,sparse}",
    )
    golden_engine: str | None = option(
        None,
        "--golden-engine",
        "engine or hf model directory whose batch-size-1 outputs become the goldens with --update-goldens",
        Receiver.ENGINE,
        metavar="DIR",
    )
    engine_options: EngineOptions = group(EngineOptions)
    data: DatasetOptions = group(DatasetOptions)
    design: DesignOptions = group(DesignOptions)
    schedules: ScheduleOptions = group(ScheduleOptions)
    request_fields: RequestFields = option(
        (),
        "--request-field",
        "a field sent with every request to an OpenAI-compatible server, KEY=VALUE (VALUE as JSON, else a "
        "string; repeatable) or a JSON object, e.g. repeat_penalty=1.0; recorded in the report and the goldens "
        f"key; reserved: {', '.join(RESERVED_FIELDS)} (--engine http://...)",
        Receiver.SERVER,
        parse=request_field,
        repeat=True,
        metavar="KEY=VALUE",
    )
    throughput: str | None = option(
        None,
        "--throughput",
        "for an estimate of the run's time in a dry run (python -m harness run --dry-run, pytest --collect-only): "
        "the sequences per second the engine generates, or a previous run's report folder whose own rate is "
        "used",
        Receiver.REPORT,
        metavar="SEQ_PER_S|REPORT",
    )
    batch_timeout: float | None = option(
        None,
        "--batch-timeout",
        "seconds one engine batch may take; a batch that runs longer fails its cell and the run goes on "
        "(default: no limit)",
        Receiver.GENERATE,
        parse=positive_real,
        bound=Range(None, DAY_S, "one day; a batch that runs longer is hung"),
        metavar="SECONDS",
    )
    # where relative folders and module:Class engines are found: pytest's rootdir, the CLI's
    # current folder (not an option; set by from_options)
    root: Path | None = None

    def __post_init__(self) -> None:
        # a notebook may give a vocabulary's word as a plain string: keep its type
        object.__setattr__(self, "rotation", Rotation(self.rotation))

    @classmethod
    def from_options(cls, values: Mapping[str, object], *, root: Path | None = None) -> RunConfig:
        """Build from parsed option values (dest -> value); relative folders resolve at root.

        Values that arrive as strings (e.g. from an ini file or a notebook) are parsed with
        the same parsers as the command line, so every error names the option.
        """
        given: dict[str, Any] = {}  # option values from outside, checked by their parsers
        for spec in OPTIONS:
            value = values.get(spec.dest)
            if value is None:
                continue
            if isinstance(value, str) and spec.parse is not None and not spec.repeat:
                try:
                    value = spec.type(value) if spec.type else value
                except argparse.ArgumentTypeError as exc:
                    raise ConfigError(str(exc)) from None
            given[spec.dest] = value
        if "request_fields" in given:
            try:
                fields = merge_request_fields(given.pop("request_fields"))
            except argparse.ArgumentTypeError as exc:
                raise ConfigError(str(exc)) from None
            if fields:
                given["request_fields"] = fields
        _check(given)
        for key in ("report_dir", "goldens_dir"):
            path = Path(str(given.get(key, getattr(cls, key)))).expanduser()
            if key in given or root is not None:
                given[key] = path if path.is_absolute() or root is None else root / path
        if given.get("cache_dir") is not None:
            given["cache_dir"] = Path(str(given["cache_dir"])).expanduser().absolute()
        if given.get("sweep"):
            given["rotation"] = Rotation.SPARSE  # each prompt once per size: the sweep's cost
        in_group = {o.dest: o.group for o in OPTIONS}
        made = {
            name: replace(kind(), **{k: v for k, v in given.items() if in_group[k] == name})
            for name, kind in groups(cls).items()
        }
        top = {k: v for k, v in given.items() if in_group[k] is None}
        return replace(cls(root=root, **made), **top)

    @property
    def roots(self) -> tuple[Path, ...]:
        """Where a module:Class engine not on sys.path is looked for (besides the current
        folder)."""
        return (self.root,) if self.root is not None else ()

    def decoding(self, beam_width: int) -> DecodingSettings:
        """The decoding settings of one beam width."""
        return DecodingSettings(
            beam_width=beam_width,
            max_new_tokens=self.max_new_tokens,
            length_penalty=self.length_penalty,
            prompt_template=self.prompt_template,
            chat=self.chat,
            request_fields=self.request_fields,
        )

    def value(self, spec: Option) -> object:
        """The value of one option in this config."""
        return getattr(getattr(self, spec.group), spec.dest) if spec.group else getattr(self, spec.dest)

    def as_dict(self) -> dict[str, Json]:
        """Options as recorded in the report: every option by its name, as JSON."""
        out: dict[str, Json] = {}
        for spec in OPTIONS:
            value = self.value(spec)
            out[spec.dest] = (
                value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
            )
        out["batch_sizes"] = list(self.batch_sizes) if self.batch_sizes else None
        out["beam_widths"] = list(self.beam_widths)
        out["shard"] = f"{self.shard[0]}/{self.shard[1]}" if self.shard else None
        out["request_fields"] = self.decoding(1).extra_fields()
        out["engine"] = redact_url(self.engine)  # a server's key never reaches a report
        if self.golden_engine:
            out["golden_engine"] = redact_url(self.golden_engine)
        return out


def _check(given: Mapping[str, object]) -> None:
    """Options that contradict each other, refused naming both and the fix."""
    check_template(given.get("prompt_template", DEFAULT_PROMPT_TEMPLATE))
    if given.get("golden_engine") and not given.get("update_goldens"):
        raise ConfigError("--golden-engine is used only to record goldens: add --update-goldens")
    server = is_url(str(given.get("engine", ""))) or given.get("backend") == Backend.OPENAI
    for spec in OPTIONS:
        if spec.server and given.get(spec.dest) is not None and not server:
            raise ConfigError(
                f"{spec.flag} applies only to an OpenAI-compatible server: use it with --engine http://HOST:PORT/v1"
            )
    if given.get("shard") and given.get("update_goldens"):
        raise ConfigError(
            "--update-goldens records goldens from a whole run: run it once without --shard, then shard the runs "
            "that use them"
        )
    if given.get("sweep") and given.get("batch_sizes") is not None:
        raise ConfigError(
            "--sweep tests every batch size up to the engine's max_batch_size: drop --batch-sizes, or bound the "
            "sweep yourself with --batch-sizes 1-N --rotation sparse"
        )


OPTIONS: tuple[Option, ...] = tuple(declared(RunConfig))


def find_option(dest: str) -> Option:
    """One run option by its name, for a command that shares it (calibrate, lint, compare)."""
    return next(spec for spec in OPTIONS if spec.dest == dest)


def read_by(backend: Backend) -> frozenset[str]:
    """The options the engine's backend reads at load (a backend class's ``reads_options``)."""
    return frozenset(o.dest for o in OPTIONS if backend in o.read_by and not o.server)
