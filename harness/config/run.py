"""RunConfig: every run option, declared once, parsed and cross-checked once.

The pytest plugin and the CLI hand the option values they parsed to ``RunConfig.from_options``;
every later stage reads only the frozen dataclass (the engine's backend the ``EngineOptions``
group it holds, each request its ``DecodingSettings``).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness.bounds import (
    BATCH_SIZE,
    BEAM_WIDTH,
    DAY_S,
    MAX_LENGTH_PENALTY,
    MAX_NEW_TOKENS,
    MAX_RETRIES,
    TOKEN_ID,
    Range,
)
from harness.config.option import Option, declared, group, option, path_option
from harness.config.parse import (
    RESERVED_FIELDS,
    Json,
    RequestFields,
    check_template,
    choice,
    env_name,
    fraction,
    merge_request_fields,
    non_negative_int,
    positive_int,
    positive_int_list,
    positive_real,
    real,
    request_field,
    reuse_setting,
    shard,
    size,
    template,
)
from harness.errors import ConfigError
from harness.model.vocab import Backend, CacheReuse, Dtype, Receiver, Rotation, TrtllmRuntime
from harness.redact import redact_url

DEFAULT_BATCH_SIZES = (1, 2, 4, 8)
DEFAULT_BEAM_WIDTHS = (1, 2, 4)
DEFAULT_PROMPT_TEMPLATE = "{text} TL;DR: "
BUNDLED = "bundled"
CACHE_FOLDER = "batch-position-harness"  # under the user's cache directory
GENERATIONS_FOLDER = "generations"
OPENAI_KEY_VARIABLE = "OPENAI_API_KEY"  # where a server's key is read from, as OpenAI's clients do
LOADERS = (Backend.TRTLLM, Backend.LLMAPI)  # the backends that load a tokenizer and special ids themselves


def harness_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The harness's folder in the user's cache: $XDG_CACHE_HOME (else ~/.cache) /
    batch-position-harness. An empty XDG_CACHE_HOME counts as unset, as the XDG spec says."""
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / CACHE_FOLDER


def _generations_folder() -> Path:
    return harness_cache_dir() / GENERATIONS_FOLDER


def is_url(spec: str) -> bool:
    """True for an OpenAI-compatible server address (http:// or https://)."""
    return spec.lower().startswith(("http://", "https://"))


@dataclass(frozen=True)
class DecodingSettings:
    """How every request is decoded; part of the goldens key."""

    beam_width: int
    max_new_tokens: int
    length_penalty: float = 1.0
    early_stopping: bool = True
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE
    chat: bool = False  # prompts wrapped in the tokenizer's chat template
    request_fields: RequestFields = ()  # --request-field, sent with every server request

    def as_dict(self) -> dict[str, Json]:
        """The settings as the goldens key them: ``chat`` only when on and the request fields
        only when given, so goldens recorded before either existed stay valid."""
        out: dict[str, Json] = {k: v for k, v in asdict(self).items() if k not in ("chat", "request_fields")}
        if self.chat:
            out["chat"] = True
        if self.request_fields:
            out["request_fields"] = self.extra_fields()
        return out

    def extra_fields(self) -> dict[str, Json]:
        """The --request-field fields as JSON values, for a request body."""
        return {key: json.loads(value) for key, value in self.request_fields}


@dataclass(frozen=True)
class EngineOptions:
    """What a backend reads when it loads an engine (passed to classes that take ``options``)."""

    tokenizer: str | None = option(
        None,
        "--tokenizer",
        "transformers tokenizer folder for the trtllm and llmapi backends (default: the engine or checkpoint "
        "folder, when it holds one)",
        Receiver.ENGINE,
        metavar="DIR",
        read_by=LOADERS,
    )
    trust_remote_code: bool = option(
        False,
        "--trust-remote-code",
        "let the tokenizer (and the LLM API) run code shipped with the model; off unless given",
        Receiver.ENGINE,
        read_by=LOADERS,
    )
    end_id: int | None = option(
        None,
        "--end-id",
        "end-of-sequence token id (default: the tokenizer's eos)",
        Receiver.ENGINE,
        parse=non_negative_int,
        bound=TOKEN_ID,
        metavar="ID",
        read_by=LOADERS,
    )
    pad_id: int | None = option(
        None,
        "--pad-id",
        "padding token id (default: the tokenizer's pad, else the end id)",
        Receiver.ENGINE,
        parse=non_negative_int,
        bound=TOKEN_ID,
        metavar="ID",
        read_by=LOADERS,
    )
    trtllm_runtime: TrtllmRuntime = option(
        TrtllmRuntime.CPP,
        "--trtllm-runtime",
        "TensorRT-LLM runner of the trtllm backend: cpp (ModelRunnerCpp, default) or python (ModelRunner)",
        Receiver.ENGINE,
        parse=choice(TrtllmRuntime),
        metavar="{cpp,python}",
        read_by=(Backend.TRTLLM,),
    )
    dtype: Dtype = option(
        Dtype.FLOAT32,
        "--dtype",
        "weights and compute dtype of the hf backend: float32 (default), bfloat16 or float16, as the model is "
        "served on GPUs (goldens are kept per dtype)",
        Receiver.ENGINE,
        parse=choice(Dtype),
        metavar="{float32,bfloat16,float16}",
        read_by=(Backend.HF,),
    )
    kv_cache_reuse: CacheReuse = option(
        CacheReuse.OFF,
        "--kv-cache-reuse",
        "KV-cache block reuse across requests for the trtllm and llmapi backends: off (default: every prompt's "
        "prefill is computed in its own batch, though the rotation sends it many times) or on (tests prefix-cache "
        "reuse on purpose); report.json engine.kv_cache_reuse records it, and unknown for a server",
        Receiver.ENGINE,
        parse=reuse_setting,
        metavar="{off,on}",
        read_by=LOADERS,
    )
    model: str | None = option(
        None,
        "--model",
        "model name sent to an OpenAI-compatible server (--engine http://HOST:PORT/v1; default: the first model "
        "of GET /v1/models)",
        Receiver.SERVER,
        metavar="NAME",
        read_by=(Backend.OPENAI,),
        server=True,
    )
    request_timeout: float = option(
        600.0,
        "--request-timeout",
        "seconds to wait for a server's answer (--engine http://...; default {default})",
        Receiver.SERVER,
        parse=positive_real,
        bound=Range(None, DAY_S, "one day; an answer that takes longer is lost"),
        metavar="SECONDS",
        read_by=(Backend.OPENAI,),
        server=True,
    )
    retries: int = option(
        2,
        "--retries",
        "times a server batch is resent after a connection error or an HTTP 5xx answer, with backoff; never "
        "after a 4xx (--engine http://...; default {default})",
        Receiver.SERVER,
        parse=non_negative_int,
        bound=Range(None, MAX_RETRIES, "each retry waits longer than the one before"),
        metavar="N",
        read_by=(Backend.OPENAI,),
        server=True,
    )
    api_key_env: str | None = option(
        None,
        "--api-key-env",
        f"the environment variable that holds the key an OpenAI-compatible server wants (default "
        f"{OPENAI_KEY_VARIABLE}, used when set), sent as Authorization: Bearer; give the variable's NAME, never "
        "the key: the key is read when the engine loads and redacted from every report, file and terminal line "
        "(--engine http://...)",
        Receiver.SERVER,
        parse=env_name,
        metavar="NAME",
        read_by=(Backend.OPENAI,),
        server=True,
    )

    def __post_init__(self) -> None:
        # a notebook may give a vocabulary's word as a plain string: keep its type
        object.__setattr__(self, "trtllm_runtime", TrtllmRuntime(self.trtllm_runtime))
        object.__setattr__(self, "dtype", Dtype(self.dtype))
        try:
            object.__setattr__(
                self, "kv_cache_reuse", reuse_setting("--kv-cache-reuse", None)(str(self.kv_cache_reuse))
            )
        except argparse.ArgumentTypeError as exc:
            raise ConfigError(str(exc)) from None

    def server_kwargs(self) -> dict[str, object]:
        """The options a server backend reads, by name (a plug-in server class gets those its
        constructor takes)."""
        return {o.dest: getattr(self, o.dest) for o in OPTIONS if o.group == "engine_options" and o.server}


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
    dataset: str | None = option(
        None,
        "--dataset",
        "documents with reference summaries: a JSONL, JSON, CSV or Parquet file, a save_to_disk folder, a preset "
        "(cnn_dailymail, xsum, samsum) or a datasets hub name read from the local cache (default: the bundled "
        "news set)",
        Receiver.DATASET,
        metavar="PATH|NAME",
    )
    dataset_config: str | None = option(
        None,
        "--dataset-config",
        "configuration of a hub dataset (default: the preset's, e.g. 3.0.0 for cnn_dailymail)",
        Receiver.DATASET,
        metavar="NAME",
    )
    split: str | None = option(
        None,
        "--split",
        "split of a hub dataset or a saved DatasetDict (default: the preset's, else test)",
        Receiver.DATASET,
        metavar="NAME",
    )
    text_field: str | None = option(
        None,
        "--text-field",
        "dataset field holding the document (default: the preset's, else text)",
        Receiver.DATASET,
        metavar="NAME",
    )
    summary_field: str | None = option(
        None,
        "--summary-field",
        "dataset field holding the reference summary (default: the preset's, else summary)",
        Receiver.DATASET,
        metavar="NAME",
    )
    num_prompts: int | None = option(
        None,
        "--num-prompts",
        "use N documents of the dataset, chosen reproducibly from --seed (default: all)",
        Receiver.DATASET,
        parse=positive_int,
        metavar="N",
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
        _generations_folder,
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
        server=True,
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
        groups = {o.dest: o.group for o in OPTIONS}
        engine = replace(EngineOptions(), **{k: v for k, v in given.items() if groups[k] == "engine_options"})
        top = {k: v for k, v in given.items() if groups[k] is None}
        return replace(cls(engine_options=engine, root=root), **top)

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
