"""RunConfig: the one place where run options are parsed and cross-checked.

The pytest plugin and the CLI both hand raw option values to ``RunConfig.from_options``;
every later stage reads only the frozen dataclass.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness.bounds import json_depth_ok, out_of_range
from harness.errors import ConfigError
from harness.model.vocab import CacheReuse, Rotation, Word
from harness.redact import redact_url

DEFAULT_BATCH_SIZES = (1, 2, 4, 8)
DEFAULT_BEAM_WIDTHS = (1, 2, 4)
DEFAULT_PROMPT_TEMPLATE = "{text} TL;DR: "
BUNDLED = "bundled"
CACHE_FOLDER = "batch-position-harness"  # under the user's cache directory
GENERATIONS_FOLDER = "generations"


class Dtype(Word):
    """The weights and compute dtype of the hf backend."""

    FLOAT32 = "float32"  # the CPU's; the default
    BFLOAT16 = "bfloat16"  # as most GPUs serve
    FLOAT16 = "float16"


class TrtllmRuntime(Word):
    """The TensorRT-LLM runner of the trtllm backend."""

    CPP = "cpp"  # ModelRunnerCpp
    PYTHON = "python"  # ModelRunner


T = TypeVar("T")
W = TypeVar("W", bound=Word)


def harness_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The harness's folder in the user's cache: $XDG_CACHE_HOME (else ~/.cache) /
    batch-position-harness. An empty XDG_CACHE_HOME counts as unset, as the XDG spec says."""
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / CACHE_FOLDER


def is_url(spec: str) -> bool:
    """True for an OpenAI-compatible server address (http:// or https://)."""
    return spec.lower().startswith(("http://", "https://"))


def check_template(template: str, option: str = "--prompt-template") -> str:
    """The template, when it has a place for the document; a ConfigError otherwise."""
    if not isinstance(template, str) or "{text}" not in template:
        raise ConfigError(
            f"{option} {template!r}: must contain {{text}}, where each document "
            "goes, e.g. 'Article: {text} Summary: '"
        )
    return template


def positive_int_list(option: str) -> Callable[[str], tuple[int, ...]]:
    """An argparse ``type=`` for comma-separated, distinct, positive integers and inclusive
    ranges: ``1,2,4,8``, ``1-16``, ``1-8,16,32``."""

    def number(value: str, p: str) -> int:
        try:
            n = int(p)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{option} {value!r}: {p!r} is not an integer; use e.g. 1,2,4,8 or 1-8,16"
            ) from None
        if n <= 0:
            raise argparse.ArgumentTypeError(f"{option} {value!r}: {n} must be at least 1")
        if too_far := out_of_range(option, n):
            raise argparse.ArgumentTypeError(f"{option} {value!r}: {n} {too_far}")
        return n

    def parse(value: str) -> tuple[int, ...]:
        parts = [p.strip() for p in str(value).split(",")]
        if not value or any(p == "" for p in parts):
            raise argparse.ArgumentTypeError(
                f"{option} {value!r}: expected comma-separated positive integers or ranges, "
                "e.g. 1,2,4,8 or 1-8,16"
            )
        numbers: list[int] = []
        for p in parts:
            low, dash, high = p.partition("-")
            if dash and low.strip():  # a range; "-2" is a (negative) number
                first, last = number(value, low.strip()), number(value, high.strip())
                if last < first:
                    raise argparse.ArgumentTypeError(
                        f"{option} {value!r}: the range {p!r} runs backwards; write {last}-{first}"
                    )
                span = range(first, last + 1)
            else:
                span = range(number(value, p), number(value, p) + 1)
            for n in span:
                if n in numbers:
                    raise argparse.ArgumentTypeError(
                        f"{option} {value!r}: {n} is given twice; list each value once"
                    )
                numbers.append(n)
        return tuple(sorted(numbers))

    return parse


def _convert(option: str, value: str, convert: Callable[[str], T], expected: str) -> T:
    """``convert(value)`` within the option's range (harness.bounds); an ArgumentTypeError
    naming the option and what it expects."""
    try:
        x = convert(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{option} {value!r}: expected {expected}") from None
    too_far = out_of_range(option, x) if isinstance(x, (int, float)) and x == x else None
    if too_far:
        raise argparse.ArgumentTypeError(f"{option} {value!r}: {too_far}")
    return x


def _int_at_least(option: str, low: int, expected: str, too_low: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        n = _convert(option, value, int, expected)
        if n < low:
            raise argparse.ArgumentTypeError(f"{option} {value!r}: {too_low}")
        return n

    return parse


def positive_int(option: str) -> Callable[[str], int]:
    """An argparse ``type=`` for one positive integer."""
    return _int_at_least(option, 1, "a positive integer", "must be at least 1")


def non_negative_int(option: str) -> Callable[[str], int]:
    """An argparse ``type=`` for an integer >= 0 (seeds)."""
    return _int_at_least(option, 0, "an integer >= 0", "must be >= 0")


REUSE_SETTINGS = (CacheReuse.OFF, CacheReuse.ON)  # what --kv-cache-reuse takes


def reuse_setting(value: str) -> CacheReuse:
    """--kv-cache-reuse: off or on (``unknown`` is what a report says of an engine, not a
    setting); ValueError otherwise."""
    word = CacheReuse(value)
    if word not in REUSE_SETTINGS:
        raise ValueError(value)
    return word


def choice(option: str, words: type[W]) -> Callable[[str], W]:
    """An argparse ``type=`` for one word of a vocabulary."""

    def parse(value: str) -> W:
        try:
            return words(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{option} {value!r}: expected one of {', '.join(w.value for w in words)}"
            ) from None

    return parse


def _reuse_choice(value: str) -> CacheReuse:
    try:
        return reuse_setting(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--kv-cache-reuse {value!r}: expected one of {', '.join(w.value for w in REUSE_SETTINGS)}"
        ) from None


def fraction(option: str, *, low: float, high: float, open_low: bool = False) -> Callable[[str], float]:
    """An argparse ``type=`` for a float within [low, high] (or (low, high])."""

    def parse(value: str) -> float:
        x = _convert(option, value, float, "a number")
        bad_low = x <= low if open_low else x < low
        if math.isnan(x) or bad_low or x > high:
            bracket = "(" if open_low else "["
            raise argparse.ArgumentTypeError(f"{option} {value!r}: must be in {bracket}{low}, {high}]")
        return x

    return parse


def real(option: str) -> Callable[[str], float]:
    """An argparse ``type=`` for any finite float."""

    def parse(value: str) -> float:
        x = _convert(option, value, float, "a number")
        if not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"{option} {value!r}: must be finite")
        return x

    return parse


def positive_real(option: str) -> Callable[[str], float]:
    """An argparse ``type=`` for a finite float > 0 (seconds)."""

    def parse(value: str) -> float:
        x = real(option)(value)
        if x <= 0:
            raise argparse.ArgumentTypeError(f"{option} {value!r}: must be more than 0")
        return x

    return parse


def shard(option: str) -> Callable[[str], tuple[int, int]]:
    """An argparse ``type=`` for ``K/N``: shard K (1-based) of N."""

    def parse(value: str) -> tuple[int, int]:
        m = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", str(value))
        if not m:
            raise argparse.ArgumentTypeError(f"{option} {value!r}: expected K/N (shard K of N), e.g. 1/2")
        k, n = int(m.group(1)), int(m.group(2))
        if n < 1:
            raise argparse.ArgumentTypeError(f"{option} {value!r}: N must be at least 1")
        if not 1 <= k <= n:
            raise argparse.ArgumentTypeError(
                f"{option} {value!r}: K must be between 1 and N ({n}); shards are numbered 1..{n}"
            )
        return k, n

    return parse


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


def parse_size(text: str, option: str = "--gpu-memory") -> int:
    """'80GiB', '141GB', '512M' or a byte count -> bytes (GB = 10^9, GiB = 2^30)."""
    m = _SIZE.match(str(text))
    if not m:
        raise ConfigError(f"{option} {text!r}: expected a size like 80GiB, 141GB or 512MiB")
    number, unit, binary = float(m.group(1)), m.group(2).upper(), bool(m.group(3))
    power = "KMGT".index(unit) + 1 if unit else 0
    size = int(number * (1024 if binary else 1000) ** power)
    if size <= 0:
        raise ConfigError(f"{option} {text!r}: must be more than 0")
    return size


def size(option: str) -> Callable[[str], str]:
    """An argparse ``type=`` that checks a memory size and keeps the text as given."""

    def parse(value: str) -> str:
        try:
            parse_size(value, option)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    return parse


OPENAI_KEY_VARIABLE = "OPENAI_API_KEY"  # where a server's key is read from, as OpenAI's clients do
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def env_name(option: str) -> Callable[[str], str]:
    """An argparse ``type=`` for the name of an environment variable. A value that is not one
    is refused without being repeated: it may be the key itself, given by mistake."""

    def parse(value: str) -> str:
        if not ENV_NAME.fullmatch(str(value)):
            raise argparse.ArgumentTypeError(
                f"{option}: expected the NAME of an environment variable (letters, digits and _, "
                f"e.g. MY_GATEWAY_KEY), not the key itself; export the key in that variable "
                "(the value given is not shown, in case it is a key)"
            )
        return str(value)

    return parse


# --request-field: fields the harness sets itself, and the option that sets each
RESERVED_FIELDS: dict[str, str] = {
    "model": "--model",
    "prompt": "--dataset and --prompt-template",
    "max_tokens": "--max-new-tokens",
    "temperature": "always 0: the harness decodes greedily",
    "n": "--beam-widths",
    "best_of": "--beam-widths",
    "use_beam_search": "--beam-widths",
    "length_penalty": "--length-penalty",
    "early_stopping": "set with the beam width",
    "stream": "the harness reads whole answers",
    "echo": "an answer must not repeat its prompt",
}
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
FIELD_DEPTH = 16  # nesting of one field's JSON value
FIELD_CHARS = 10_000  # one field's JSON value, as sent
RequestFields = tuple[tuple[str, str], ...]


def _field_value(option: str, given: str, raw: str) -> Any:
    """VALUE of KEY=VALUE: JSON where it parses, else the text as a string."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        if raw.lstrip()[:1] in ("[", "{", '"'):
            raise argparse.ArgumentTypeError(
                f"{option} {given!r}: the value is not valid JSON; "
                "quote it for the shell, e.g. stop='[\"END\"]'"
            ) from None
        return raw


def _field(option: str, given: str, key: Any, value: Any) -> tuple[str, str]:
    """One checked (key, canonical JSON) pair."""
    if not isinstance(key, str) or not FIELD_NAME.fullmatch(key):
        raise argparse.ArgumentTypeError(
            f"{option} {given!r}: {key!r} is not a field name; use "
            "letters, digits and _ (e.g. repeat_penalty=1.0)"
        )
    if key in RESERVED_FIELDS:
        raise argparse.ArgumentTypeError(
            f"{option} {given!r}: {key} is set by the harness ({RESERVED_FIELDS[key]}); "
            f"reserved: {', '.join(RESERVED_FIELDS)}"
        )
    if not json_depth_ok(value, FIELD_DEPTH):
        raise argparse.ArgumentTypeError(
            f"{option} {given!r}: the value nests deeper than {FIELD_DEPTH} levels"
        )
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{option} {given!r}: NaN and Infinity are not JSON; give a finite number"
        ) from None
    if len(text) > FIELD_CHARS:
        raise argparse.ArgumentTypeError(
            f"{option} {given!r}: the value is longer than {FIELD_CHARS} characters"
        )
    return key, text


def request_field(option: str) -> Callable[[str], RequestFields]:
    """An argparse ``type=`` for one --request-field: KEY=VALUE (VALUE as JSON, else a string)
    or a JSON object of fields."""

    def parse(value: str) -> RequestFields:
        text = str(value).strip()
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except (ValueError, RecursionError):
                obj = None
            if not isinstance(obj, dict) or not obj:
                raise argparse.ArgumentTypeError(
                    f"{option} {value!r}: expected a JSON object of "
                    "fields, e.g. '{\"repeat_penalty\": 1.0}'"
                )
            return tuple(_field(option, text, k, v) for k, v in obj.items())
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(
                f"{option} {value!r}: expected KEY=VALUE (VALUE as "
                "JSON, else a string), e.g. repeat_penalty=1.0"
            )
        return (_field(option, text, key.strip(), _field_value(option, text, raw)),)

    return parse


def _is_pair(item: Any) -> bool:
    return (
        isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], str)
    )


def _parts(given: Any, parse: Callable[[str], RequestFields]) -> list[RequestFields]:
    """Each occurrence, parsed (again: a parsed pair round-trips through KEY=JSON)."""
    if isinstance(given, str):
        return [parse(given)]
    if isinstance(given, Mapping):
        return [parse(json.dumps({k: v})) for k, v in given.items()]
    if _is_pair(given):
        return [parse(f"{given[0]}={given[1]}")]
    return [part for item in given for part in _parts(item, parse)]


def merge_request_fields(given: Any, option: str = "--request-field") -> RequestFields:
    """Every occurrence of the option (argparse's list of parsed ones, a string, pairs, or a
    mapping, as a notebook may pass) as one tuple sorted by key; a key given twice with two
    values is an error."""
    merged: dict[str, str] = {}
    for key, text in (pair for part in _parts(given, request_field(option)) for pair in part):
        if key in merged and merged[key] != text:
            raise ConfigError(f"{option}: {key} is given twice ({merged[key]} and {text}); give it once")
        merged[key] = text
    return tuple(sorted(merged.items()))


@dataclass(frozen=True)
class OptionSpec:
    """One run option, shared by the pytest plugin and the CLI so they cannot drift."""

    flag: str
    dest: str
    help: str
    type: Callable[[str], Any] | None = None
    action: str | None = None
    metavar: str | None = None

    @property
    def default(self) -> bool | None:
        """What the parser starts from: False for a flag, else None (RunConfig's default
        applies; the one place defaults are written is RunConfig's fields)."""
        return False if self.action == "store_true" else None


@dataclass(frozen=True)
class DecodingSettings:
    """How every request is decoded; part of the goldens key."""

    beam_width: int
    max_new_tokens: int
    length_penalty: float = 1.0
    early_stopping: bool = True
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE
    chat: bool = False  # prompts wrapped in the tokenizer's chat template
    # --request-field: (key, value as canonical JSON) sorted by key, sent with every server request
    request_fields: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.chat:  # goldens recorded before --chat existed stay valid
            del out["chat"]
        del out["request_fields"]
        if self.request_fields:  # likewise: only runs that send fields key them
            out["request_fields"] = self.extra_fields()
        return out

    def extra_fields(self) -> dict[str, Any]:
        """The --request-field fields as JSON values, for a request body."""
        return {key: json.loads(value) for key, value in self.request_fields}


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, validated; built once per session."""

    engine: str = BUNDLED
    backend: str | None = None
    batch_sizes: tuple[int, ...] | None = None  # None: the default grid, capped by the engine
    sweep: bool = False  # every batch size 1..max_batch_size, sparse rotation (docs/method.md)
    beam_widths: tuple[int, ...] = DEFAULT_BEAM_WIDTHS
    max_new_tokens: int = 64
    length_penalty: float = 1.0
    tolerance: float = 0.02
    alpha: float = 0.01
    dataset: str | None = None
    dataset_config: str | None = None
    split: str | None = None
    text_field: str | None = None  # None: the preset's field, else text
    summary_field: str | None = None  # None: the preset's field, else summary
    num_prompts: int | None = None  # None: every document
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE
    chat: bool = False
    gpu_memory: str | None = None
    seed: int = 0
    report_dir: Path = Path("reports")
    goldens_dir: Path = Path("goldens")
    signoff_by: str | None = None
    cache_dir: Path = field(default_factory=lambda: harness_cache_dir() / GENERATIONS_FOLDER)
    no_cache: bool = False
    update_goldens: bool = False
    golden_engine: str | None = None
    trtllm_runtime: TrtllmRuntime = TrtllmRuntime.CPP
    dtype: Dtype = Dtype.FLOAT32
    kv_cache_reuse: CacheReuse = CacheReuse.OFF  # off or on (unknown is what a report says)
    tokenizer: str | None = None
    trust_remote_code: bool = False
    end_id: int | None = None
    pad_id: int | None = None
    model: str | None = None
    request_timeout: float = 600.0
    retries: int = 2
    shard: tuple[int, int] | None = None  # (K, N): shard K of N, 1-based
    rotation: Rotation = Rotation.FULL
    batch_timeout: float | None = None  # seconds; None: wait for every batch
    deterministic: bool = False  # gate on outputs equal to batch size 1's (batch-invariant engines)
    request_fields: RequestFields = ()  # --request-field, sorted by key
    # --api-key-env: the NAME of the variable holding a server's key (never the key: this
    # config is recorded in report.json; the openai backend reads the value when it loads)
    api_key_env: str | None = None
    throughput: str | None = None  # sequences/s, or a report folder: the dry run's estimate
    # where relative folders and module:Class engines are found: pytest's rootdir, the CLI's
    # current folder (not an option; set by from_options)
    root: Path | None = None

    def __post_init__(self) -> None:
        # a notebook may give a vocabulary's word as a plain string: keep its type
        object.__setattr__(self, "rotation", Rotation(self.rotation))
        object.__setattr__(self, "trtllm_runtime", TrtllmRuntime(self.trtllm_runtime))
        object.__setattr__(self, "dtype", Dtype(self.dtype))
        object.__setattr__(self, "kv_cache_reuse", reuse_setting(self.kv_cache_reuse))

    @classmethod
    def from_options(cls, values: dict[str, Any], *, root: Path | None = None) -> RunConfig:
        """Build from parsed option values (dest -> value); relative folders resolve at root.

        Values that arrive as strings (e.g. from an ini file or a notebook) are parsed with
        the same parsers as the command line, so every error names the option.
        """
        kwargs: dict[str, Any] = {}
        for spec in OPTIONS:
            value = values.get(spec.dest)
            if value is None:
                continue
            if isinstance(value, str) and spec.type is not None:
                try:
                    value = spec.type(value)
                except argparse.ArgumentTypeError as exc:
                    raise ConfigError(str(exc)) from None
            kwargs[spec.dest] = value
        if "request_fields" in kwargs:
            try:
                fields = merge_request_fields(kwargs.pop("request_fields"))
            except argparse.ArgumentTypeError as exc:
                raise ConfigError(str(exc)) from None
            if fields:
                kwargs["request_fields"] = fields
        if kwargs.get("cache_dir") is not None:
            kwargs["cache_dir"] = Path(kwargs["cache_dir"]).expanduser().absolute()
        for key in ("report_dir", "goldens_dir"):
            if key in kwargs:
                path = Path(kwargs[key]).expanduser()
                kwargs[key] = path if path.is_absolute() or root is None else root / path
            elif root is not None:
                kwargs[key] = root / getattr(cls, key)
        check_template(kwargs.get("prompt_template", DEFAULT_PROMPT_TEMPLATE))
        if kwargs.get("golden_engine") and not kwargs.get("update_goldens"):
            raise ConfigError("--golden-engine is used only to record goldens: add --update-goldens")
        server = is_url(str(kwargs.get("engine", ""))) or kwargs.get("backend") == "openai"
        for dest in SERVER_OPTIONS:
            if kwargs.get(dest) is not None and not server:
                raise ConfigError(
                    f"{option(dest).flag} applies only to an OpenAI-compatible "
                    "server: use it with --engine http://HOST:PORT/v1"
                )
        if kwargs.get("shard") and kwargs.get("update_goldens"):
            raise ConfigError(
                "--update-goldens records goldens from a whole run: run it once "
                "without --shard, then shard the runs that use them"
            )
        if kwargs.get("sweep"):
            if kwargs.get("batch_sizes") is not None:
                raise ConfigError(
                    "--sweep tests every batch size up to the engine's max_batch_size: "
                    "drop --batch-sizes, or bound the sweep yourself with "
                    "--batch-sizes 1-N --rotation sparse"
                )
            kwargs["rotation"] = Rotation.SPARSE  # each prompt once per size: the sweep's cost
        return cls(**kwargs, root=root)

    @property
    def roots(self) -> tuple[Path, ...]:
        """Where a module:Class engine not on sys.path is looked for (besides the current
        folder)."""
        return (self.root,) if self.root is not None else ()

    def engine_options(self) -> EngineOptions:
        """The options backends read at load time."""
        return EngineOptions(
            tokenizer=self.tokenizer,
            trust_remote_code=self.trust_remote_code,
            end_id=self.end_id,
            pad_id=self.pad_id,
            trtllm_runtime=self.trtllm_runtime,
            dtype=self.dtype,
            kv_cache_reuse=self.kv_cache_reuse,
            model=self.model,
            request_timeout=self.request_timeout,
            retries=self.retries,
            api_key_env=self.api_key_env,
        )

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

    def as_dict(self) -> dict[str, Any]:
        """Options as recorded in the report."""
        out = {spec.dest: getattr(self, spec.dest) for spec in OPTIONS}
        out["report_dir"] = str(self.report_dir)
        out["goldens_dir"] = str(self.goldens_dir)
        out["cache_dir"] = str(self.cache_dir)
        out["batch_sizes"] = list(self.batch_sizes) if self.batch_sizes else None
        out["beam_widths"] = list(self.beam_widths)
        out["shard"] = f"{self.shard[0]}/{self.shard[1]}" if self.shard else None
        out["request_fields"] = {k: json.loads(v) for k, v in self.request_fields}
        out["engine"] = redact_url(self.engine)  # a server's key never reaches a report
        if self.golden_engine:
            out["golden_engine"] = redact_url(self.golden_engine)
        return out


@dataclass(frozen=True)
class EngineOptions:
    """What a backend reads when it loads an engine (passed to classes that take ``options``)."""

    tokenizer: str | None = None
    trust_remote_code: bool = False
    end_id: int | None = None
    pad_id: int | None = None
    trtllm_runtime: TrtllmRuntime = RunConfig.trtllm_runtime
    dtype: Dtype = RunConfig.dtype  # hf: the weights and compute dtype
    kv_cache_reuse: CacheReuse = RunConfig.kv_cache_reuse  # trtllm, llmapi: block reuse off/on
    model: str | None = None  # openai: the server's model name
    request_timeout: float = RunConfig.request_timeout
    retries: int = RunConfig.retries
    api_key_env: str | None = None  # openai: the variable holding the key (its name only)

    def server_kwargs(self) -> dict[str, Any]:
        """The openai backend's keyword options."""
        return {
            "model": self.model,
            "request_timeout": self.request_timeout,
            "retries": self.retries,
            "api_key_env": self.api_key_env,
        }


def _listed(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "--engine",
        "engine",
        "engine directory (emulator or TensorRT-LLM), hf model "
        "directory, module:Class or a server's http://HOST:PORT/v1 (default: the "
        "bundled emulator engine)",
        metavar="DIR",
    ),
    OptionSpec(
        "--backend",
        "backend",
        "emulator, hf, trtllm, llmapi, openai or module:Class (default: detected from the engine)",
        metavar="NAME",
    ),
    OptionSpec(
        "--batch-sizes",
        "batch_sizes",
        "comma-separated batch sizes and ranges, e.g. "
        "1-16 or 1-8,16,32 (default "
        f"{_listed(DEFAULT_BATCH_SIZES)}, capped at the engine's max_batch_size)",
        positive_int_list("--batch-sizes"),
        metavar="LIST",
    ),
    OptionSpec(
        "--sweep",
        "sweep",
        "every batch size from 1 to the engine's max_batch_size "
        "(config.json), each prompt once per size (--rotation sparse): names, per beam "
        "width, the batch size from which cells fail (report.json boundaries); cost and "
        "detection in docs/method.md",
        action="store_true",
    ),
    OptionSpec(
        "--beam-widths",
        "beam_widths",
        f"comma-separated beam widths (default {_listed(RunConfig.beam_widths)})",
        positive_int_list("--beam-widths"),
        metavar="LIST",
    ),
    OptionSpec(
        "--max-new-tokens",
        "max_new_tokens",
        f"tokens generated per prompt (default {RunConfig.max_new_tokens})",
        positive_int("--max-new-tokens"),
        metavar="N",
    ),
    OptionSpec(
        "--length-penalty",
        "length_penalty",
        f"beam-search length penalty (default {RunConfig.length_penalty})",
        real("--length-penalty"),
        metavar="X",
    ),
    OptionSpec(
        "--tolerance",
        "tolerance",
        "ROUGE-L drop that counts as a regression: a position "
        "below the other positions of its batch, or quality against the references below "
        f"batch size 1's (default {RunConfig.tolerance})",
        fraction("--tolerance", low=0.0, high=1.0),
        metavar="X",
    ),
    OptionSpec(
        "--alpha",
        "alpha",
        "significance level of each test after Holm's correction "
        f"over every test of the run (default {RunConfig.alpha})",
        fraction("--alpha", low=0.0, high=0.5, open_low=True),
        metavar="P",
    ),
    OptionSpec(
        "--deterministic",
        "deterministic",
        "also fail every position where an output "
        "differs from batch size 1's, for batch-invariant engines (vLLM's batch-invariant "
        "mode, SGLang's deterministic inference); off: differing outputs are reported, and "
        "fail only when they lose quality or depend on the position",
        action="store_true",
    ),
    OptionSpec(
        "--dataset",
        "dataset",
        "documents with reference summaries: a JSONL, JSON, CSV "
        "or Parquet file, a save_to_disk folder, a preset (cnn_dailymail, xsum, samsum) or "
        "a datasets hub name read from the local cache (default: the bundled news set)",
        metavar="PATH|NAME",
    ),
    OptionSpec(
        "--dataset-config",
        "dataset_config",
        "configuration of a hub dataset (default: the preset's, e.g. 3.0.0 for cnn_dailymail)",
        metavar="NAME",
    ),
    OptionSpec(
        "--split",
        "split",
        "split of a hub dataset or a saved DatasetDict (default: the preset's, else test)",
        metavar="NAME",
    ),
    OptionSpec(
        "--text-field",
        "text_field",
        "dataset field holding the document (default: the preset's, else text)",
        metavar="NAME",
    ),
    OptionSpec(
        "--summary-field",
        "summary_field",
        "dataset field holding the reference summary (default: the preset's, else summary)",
        metavar="NAME",
    ),
    OptionSpec(
        "--num-prompts",
        "num_prompts",
        "use N documents of the dataset, chosen reproducibly from --seed (default: all)",
        positive_int("--num-prompts"),
        metavar="N",
    ),
    OptionSpec(
        "--prompt-template",
        "prompt_template",
        f"prompt built from each document; must contain {{text}} (default {RunConfig.prompt_template!r})",
        metavar="TEMPLATE",
    ),
    OptionSpec(
        "--chat",
        "chat",
        "wrap each prompt in the engine tokenizer's chat template "
        "(as the user's message, with the generation prompt)",
        action="store_true",
    ),
    OptionSpec(
        "--gpu-memory",
        "gpu_memory",
        "GPU memory for the KV-cache budget, e.g. 80GiB (default: read from the GPU, else 80GiB)",
        size("--gpu-memory"),
        metavar="SIZE",
    ),
    OptionSpec(
        "--seed",
        "seed",
        f"seed for the order of prompts in batches and the --num-prompts subset (default {RunConfig.seed})",
        non_negative_int("--seed"),
        metavar="N",
    ),
    OptionSpec(
        "--report-dir",
        "report_dir",
        f"folder under which each run writes a new report folder (default {RunConfig.report_dir}/)",
        metavar="DIR",
    ),
    OptionSpec(
        "--goldens-dir", "goldens_dir", f"folder of goldens (default {RunConfig.goldens_dir}/)", metavar="DIR"
    ),
    OptionSpec(
        "--cache-dir",
        "cache_dir",
        "generation cache folder (default "
        f"~/.cache/{CACHE_FOLDER}/{GENERATIONS_FOLDER}; $XDG_CACHE_HOME for ~/.cache "
        "when set)",
        metavar="DIR",
    ),
    OptionSpec("--no-cache", "no_cache", "neither read nor write the generation cache", action="store_true"),
    OptionSpec("--signoff-by", "signoff_by", "name recorded in the report's sign-off block", metavar="NAME"),
    OptionSpec(
        "--update-goldens",
        "update_goldens",
        "record goldens from this run (batch size 1 "
        "of the engine, or --golden-engine) and write them after a complete run",
        action="store_true",
    ),
    OptionSpec(
        "--shard",
        "shard",
        "run only shard K of N of the cells (for CI matrices); "
        "combine the shard reports with `python -m harness merge`",
        shard("--shard"),
        metavar="K/N",
    ),
    OptionSpec(
        "--rotation",
        "rotation",
        "full (default: every prompt at every position of every "
        "cell, N x B sequences per cell) or sparse (each prompt at one position per cell, "
        "N sequences per cell: B times cheaper, less sensitive; see docs/method.md)",
        choice("--rotation", Rotation),
        metavar="{full,sparse}",
    ),
    OptionSpec(
        "--golden-engine",
        "golden_engine",
        "engine or hf model directory whose batch-size-1 outputs become the goldens with --update-goldens",
        metavar="DIR",
    ),
    OptionSpec(
        "--trtllm-runtime",
        "trtllm_runtime",
        "TensorRT-LLM runner of the trtllm backend: cpp (ModelRunnerCpp, default) or python (ModelRunner)",
        choice("--trtllm-runtime", TrtllmRuntime),
        metavar="{cpp,python}",
    ),
    OptionSpec(
        "--kv-cache-reuse",
        "kv_cache_reuse",
        "KV-cache block reuse across requests for "
        "the trtllm and llmapi backends: off (default: every prompt's prefill is computed in "
        "its own batch, though the rotation sends it many times) or on (tests prefix-cache "
        "reuse on purpose); report.json engine.kv_cache_reuse records it, and unknown for a "
        "server",
        _reuse_choice,
        metavar="{off,on}",
    ),
    OptionSpec(
        "--dtype",
        "dtype",
        "weights and compute dtype of the hf backend: float32 (default), "
        "bfloat16 or float16, as the model is served on GPUs (goldens are kept per dtype)",
        choice("--dtype", Dtype),
        metavar="{float32,bfloat16,float16}",
    ),
    OptionSpec(
        "--tokenizer",
        "tokenizer",
        "transformers tokenizer folder for the trtllm and llmapi "
        "backends (default: the engine or checkpoint folder, when it holds one)",
        metavar="DIR",
    ),
    OptionSpec(
        "--trust-remote-code",
        "trust_remote_code",
        "let the tokenizer (and the LLM API) run code shipped with the model; off unless given",
        action="store_true",
    ),
    OptionSpec(
        "--end-id",
        "end_id",
        "end-of-sequence token id (default: the tokenizer's eos)",
        non_negative_int("--end-id"),
        metavar="ID",
    ),
    OptionSpec(
        "--pad-id",
        "pad_id",
        "padding token id (default: the tokenizer's pad, else the end id)",
        non_negative_int("--pad-id"),
        metavar="ID",
    ),
    OptionSpec(
        "--model",
        "model",
        "model name sent to an OpenAI-compatible server (--engine "
        "http://HOST:PORT/v1; default: the first model of GET /v1/models)",
        metavar="NAME",
    ),
    OptionSpec(
        "--request-timeout",
        "request_timeout",
        f"seconds to wait for a server's answer (--engine http://...; default {RunConfig.request_timeout:g})",
        positive_real("--request-timeout"),
        metavar="SECONDS",
    ),
    OptionSpec(
        "--retries",
        "retries",
        "times a server batch is resent after a connection error or "
        "an HTTP 5xx answer, with backoff; never after a 4xx (--engine http://...; default "
        f"{RunConfig.retries})",
        non_negative_int("--retries"),
        metavar="N",
    ),
    OptionSpec(
        "--api-key-env",
        "api_key_env",
        "the environment variable that holds the key "
        f"an OpenAI-compatible server wants (default {OPENAI_KEY_VARIABLE}, used when set), "
        "sent as Authorization: Bearer; give the variable's NAME, never the key: the key "
        "is read when the engine loads and redacted from every report, file and terminal "
        "line (--engine http://...)",
        env_name("--api-key-env"),
        metavar="NAME",
    ),
    OptionSpec(
        "--request-field",
        "request_fields",
        "a field sent with every request to an "
        "OpenAI-compatible server, KEY=VALUE (VALUE as JSON, else a string; repeatable) or a "
        "JSON object, e.g. repeat_penalty=1.0; recorded in the report and the goldens key; "
        f"reserved: {', '.join(RESERVED_FIELDS)} (--engine http://...)",
        request_field("--request-field"),
        action="append",
        metavar="KEY=VALUE",
    ),
    OptionSpec(
        "--throughput",
        "throughput",
        "for an estimate of the run's time in a dry run "
        "(python -m harness run --dry-run, pytest --collect-only): the sequences per second "
        "the engine generates, or a previous run's report folder whose own rate is used",
        metavar="SEQ_PER_S|REPORT",
    ),
    OptionSpec(
        "--batch-timeout",
        "batch_timeout",
        "seconds one engine batch may take; a batch "
        "that runs longer fails its cell and the run goes on (default: no limit)",
        positive_real("--batch-timeout"),
        metavar="SECONDS",
    ),
)

SERVER_OPTIONS = ("model", "request_timeout", "retries", "request_fields", "api_key_env")


def option(dest: str) -> OptionSpec:
    """The spec of one run option, for a command that shares it (calibrate, lint, compare)."""
    return next(spec for spec in OPTIONS if spec.dest == dest)
