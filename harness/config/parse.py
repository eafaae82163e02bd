"""How an option's text becomes its value: argparse ``type=`` parsers, each refusing in one line
that names the option, the value and what it takes, within the option's bound
(``harness.bounds.Range``, declared with the option)."""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import TypeVar

from harness.bounds import Range, json_depth_ok
from harness.errors import ConfigError
from harness.model.json import Json as Json
from harness.model.vocab import CacheReuse, Word

T = TypeVar("T")
W = TypeVar("W", bound=Word)
RequestFields = tuple[tuple[str, str], ...]  # (key, value as canonical JSON), sorted by key


def _too_far(bound: Range | None, value: float) -> str | None:
    return bound.problem(value) if bound is not None else None


def _convert(flag: str, value: str, convert: Callable[[str], T], expected: str, bound: Range | None) -> T:
    """``convert(value)`` within ``bound``; an ArgumentTypeError naming the option and what it
    expects."""
    try:
        x = convert(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{flag} {value!r}: expected {expected}") from None
    too_far = _too_far(bound, x) if isinstance(x, (int, float)) and x == x else None
    if too_far:
        raise argparse.ArgumentTypeError(f"{flag} {value!r}: {too_far}")
    return x


def positive_int_list(flag: str, bound: Range | None = None) -> Callable[[str], tuple[int, ...]]:
    """Comma-separated, distinct, positive integers and inclusive ranges: ``1,2,4,8``,
    ``1-16``, ``1-8,16,32``."""

    def number(value: str, p: str) -> int:
        try:
            n = int(p)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag} {value!r}: {p!r} is not an integer; use e.g. 1,2,4,8 or 1-8,16"
            ) from None
        if n <= 0:
            raise argparse.ArgumentTypeError(f"{flag} {value!r}: {n} must be at least 1")
        if too_far := _too_far(bound, n):
            raise argparse.ArgumentTypeError(f"{flag} {value!r}: {n} {too_far}")
        return n

    def parse(value: str) -> tuple[int, ...]:
        parts = [p.strip() for p in str(value).split(",")]
        if not value or any(p == "" for p in parts):
            raise argparse.ArgumentTypeError(
                f"{flag} {value!r}: expected comma-separated positive integers or ranges, e.g. 1,2,4,8 or 1-8,16"
            )
        numbers: list[int] = []
        for p in parts:
            low, dash, high = p.partition("-")
            if dash and low.strip():  # a range; "-2" is a (negative) number
                first, last = number(value, low.strip()), number(value, high.strip())
                if last < first:
                    raise argparse.ArgumentTypeError(
                        f"{flag} {value!r}: the range {p!r} runs backwards; write {last}-{first}"
                    )
                span = range(first, last + 1)
            else:
                span = range(number(value, p), number(value, p) + 1)
            for n in span:
                if n in numbers:
                    raise argparse.ArgumentTypeError(
                        f"{flag} {value!r}: {n} is given twice; list each value once"
                    )
                numbers.append(n)
        return tuple(sorted(numbers))

    return parse


def _int_at_least(
    flag: str, bound: Range | None, low: int, expected: str, too_low: str
) -> Callable[[str], int]:
    def parse(value: str) -> int:
        n = _convert(flag, value, int, expected, bound)
        if n < low:
            raise argparse.ArgumentTypeError(f"{flag} {value!r}: {too_low}")
        return n

    return parse


def positive_int(flag: str, bound: Range | None = None) -> Callable[[str], int]:
    """One positive integer."""
    return _int_at_least(flag, bound, 1, "a positive integer", "must be at least 1")


def non_negative_int(flag: str, bound: Range | None = None) -> Callable[[str], int]:
    """An integer >= 0 (seeds, token ids)."""
    return _int_at_least(flag, bound, 0, "an integer >= 0", "must be >= 0")


def fraction(flag: str, bound: Range | None = None) -> Callable[[str], float]:
    """A float within ``bound``'s interval, [low, high] (or (low, high] when its low end is
    open)."""
    interval = bound or Range(0.0, 1.0)
    low, high = interval.low or 0.0, interval.high if interval.high is not None else 1.0

    def parse(value: str) -> float:
        x = _convert(flag, value, float, "a number", None)
        bad_low = x <= low if interval.open_low else x < low
        if math.isnan(x) or bad_low or x > high:
            bracket = "(" if interval.open_low else "["
            raise argparse.ArgumentTypeError(f"{flag} {value!r}: must be in {bracket}{low}, {high}]")
        return x

    return parse


def real(flag: str, bound: Range | None = None) -> Callable[[str], float]:
    """Any finite float within ``bound``."""

    def parse(value: str) -> float:
        x = _convert(flag, value, float, "a number", bound)
        if not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"{flag} {value!r}: must be finite")
        return x

    return parse


def _real_from(
    flag: str, bound: Range | None, low: float, open_low: bool, why: str
) -> Callable[[str], float]:
    """A finite float within ``bound`` from ``low`` up (``open_low``: ``low`` itself refused)."""
    finite = real(flag, bound)

    def parse(value: str) -> float:
        x = finite(value)
        if x < low or (open_low and x == low):
            raise argparse.ArgumentTypeError(f"{flag} {value!r}: {why}")
        return x

    return parse


def positive_real(flag: str, bound: Range | None = None) -> Callable[[str], float]:
    """A finite float > 0 (seconds)."""
    return _real_from(flag, bound, 0.0, True, "must be more than 0")


def non_negative_real(flag: str, bound: Range | None = None) -> Callable[[str], float]:
    """A finite float >= 0 (milliseconds to wait)."""
    return _real_from(flag, bound, 0.0, False, "must be >= 0")


def shard(flag: str, bound: Range | None = None) -> Callable[[str], tuple[int, int]]:
    """``K/N``: shard K (1-based) of N."""

    def parse(value: str) -> tuple[int, int]:
        m = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", str(value))
        if not m:
            raise argparse.ArgumentTypeError(f"{flag} {value!r}: expected K/N (shard K of N), e.g. 1/2")
        k, n = int(m.group(1)), int(m.group(2))
        if n < 1:
            raise argparse.ArgumentTypeError(f"{flag} {value!r}: N must be at least 1")
        if not 1 <= k <= n:
            raise argparse.ArgumentTypeError(
                f"{flag} {value!r}: K must be between 1 and N ({n}); shards are numbered 1..{n}"
            )
        return k, n

    return parse


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


def parse_size(text: str, flag: str = "--gpu-memory") -> int:
    """'80GiB', '141GB', '512M' or a byte count -> bytes (GB = 10^9, GiB = 2^30)."""
    m = _SIZE.match(str(text))
    if not m:
        raise ConfigError(f"{flag} {text!r}: expected a size like 80GiB, 141GB or 512MiB")
    number, unit, binary = float(m.group(1)), m.group(2).upper(), bool(m.group(3))
    power = "KMGT".index(unit) + 1 if unit else 0
    size = int(number * (1024 if binary else 1000) ** power)
    if size <= 0:
        raise ConfigError(f"{flag} {text!r}: must be more than 0")
    return size


def size(flag: str, bound: Range | None = None) -> Callable[[str], str]:
    """A memory size, checked and kept as the text given."""

    def parse(value: str) -> str:
        try:
            parse_size(value, flag)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    return parse


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def env_name(flag: str, bound: Range | None = None) -> Callable[[str], str]:
    """The name of an environment variable. A value that is not one is refused without being
    repeated: it may be the key itself, given by mistake."""

    def parse(value: str) -> str:
        if not ENV_NAME.fullmatch(str(value)):
            raise argparse.ArgumentTypeError(
                f"{flag}: expected the NAME of an environment variable (letters, digits and _, "
                f"e.g. MY_GATEWAY_KEY), not the key itself; export the key in that variable "
                "(the value given is not shown, in case it is a key)"
            )
        return str(value)

    return parse


def check_template(template: object, flag: str = "--prompt-template") -> str:
    """The template, when it has a place for the document; a ConfigError otherwise."""
    if not isinstance(template, str) or "{text}" not in template:
        raise ConfigError(
            f"{flag} {template!r}: must contain {{text}}, where each document goes, e.g. 'Article: {{text}} Summary: '"
        )
    return template


def template(flag: str, bound: Range | None = None) -> Callable[[str], str]:
    """A prompt template: text with a place for the document, ``{text}``."""

    def parse(value: str) -> str:
        try:
            return check_template(value, flag)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def choice(
    words: type[W], allowed: tuple[W, ...] | None = None
) -> Callable[[str, Range | None], Callable[[str], W]]:
    """A parser factory for one word of a vocabulary (``allowed``: only these of its words)."""

    def factory(flag: str, bound: Range | None = None) -> Callable[[str], W]:
        taken = allowed or tuple(words)

        def parse(value: str) -> W:
            try:
                word = words(value)
            except ValueError:
                word = None
            if word is None or word not in taken:
                raise argparse.ArgumentTypeError(
                    f"{flag} {value!r}: expected one of {', '.join(w.value for w in taken)}"
                )
            return word

        return parse

    return factory


REUSE_SETTINGS = (CacheReuse.OFF, CacheReuse.ON)  # what --kv-cache-reuse takes ("unknown" is a report's word)
reuse_setting = choice(CacheReuse, REUSE_SETTINGS)


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


def _field_value(flag: str, given: str, raw: str) -> Json:
    """VALUE of KEY=VALUE: JSON where it parses, else the text as a string."""
    try:
        value: Json = json.loads(raw)
        return value
    except (ValueError, RecursionError):
        if raw.lstrip()[:1] in ("[", "{", '"'):
            raise argparse.ArgumentTypeError(
                f"{flag} {given!r}: the value is not valid JSON; quote it for the shell, e.g. stop='[\"END\"]'"
            ) from None
        return raw


def _field(flag: str, given: str, key: object, value: object) -> tuple[str, str]:
    """One checked (key, canonical JSON) pair."""
    if not isinstance(key, str) or not FIELD_NAME.fullmatch(key):
        raise argparse.ArgumentTypeError(
            f"{flag} {given!r}: {key!r} is not a field name; use letters, digits and _ (e.g. repeat_penalty=1.0)"
        )
    if key in RESERVED_FIELDS:
        raise argparse.ArgumentTypeError(
            f"{flag} {given!r}: {key} is set by the harness ({RESERVED_FIELDS[key]}); "
            f"reserved: {', '.join(RESERVED_FIELDS)}"
        )
    if not json_depth_ok(value, FIELD_DEPTH):
        raise argparse.ArgumentTypeError(
            f"{flag} {given!r}: the value nests deeper than {FIELD_DEPTH} levels"
        )
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{flag} {given!r}: NaN and Infinity are not JSON; give a finite number"
        ) from None
    if len(text) > FIELD_CHARS:
        raise argparse.ArgumentTypeError(
            f"{flag} {given!r}: the value is longer than {FIELD_CHARS} characters"
        )
    return key, text


def request_field(flag: str, bound: Range | None = None) -> Callable[[str], RequestFields]:
    """One --request-field: KEY=VALUE (VALUE as JSON, else a string) or a JSON object of
    fields."""

    def parse(value: str) -> RequestFields:
        text = str(value).strip()
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except (ValueError, RecursionError):
                obj = None
            if not isinstance(obj, dict) or not obj:
                raise argparse.ArgumentTypeError(
                    f"{flag} {value!r}: expected a JSON object of fields, e.g. '{{\"repeat_penalty\": 1.0}}'"
                )
            return tuple(_field(flag, text, k, v) for k, v in obj.items())
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(
                f"{flag} {value!r}: expected KEY=VALUE (VALUE as JSON, else a string), e.g. repeat_penalty=1.0"
            )
        return (_field(flag, text, key.strip(), _field_value(flag, text, raw)),)

    return parse


def _is_pair(item: object) -> bool:
    return (
        isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], str)
    )


def _parts(given: object, parse: Callable[[str], RequestFields]) -> list[RequestFields]:
    """Each occurrence, parsed (again: a parsed pair round-trips through KEY=JSON)."""
    if isinstance(given, str):
        return [parse(given)]
    if isinstance(given, Mapping):
        return [parse(json.dumps({k: v})) for k, v in given.items()]
    if isinstance(given, tuple) and _is_pair(given):
        return [parse(f"{given[0]}={given[1]}")]
    if isinstance(given, (list, tuple)):
        return [part for item in given for part in _parts(item, parse)]
    raise argparse.ArgumentTypeError(f"--request-field: {type(given).__name__} is not KEY=VALUE")


def merge_request_fields(given: object, flag: str = "--request-field") -> RequestFields:
    """Every occurrence of the option (argparse's list of parsed ones, a string, pairs, or a
    mapping, as a notebook may pass) as one tuple sorted by key; a key given twice with two
    values is an error."""
    merged: dict[str, str] = {}
    for key, text in (pair for part in _parts(given, request_field(flag)) for pair in part):
        if key in merged and merged[key] != text:
            raise ConfigError(f"{flag}: {key} is given twice ({merged[key]} and {text}); give it once")
        merged[key] = text
    return tuple(sorted(merged.items()))
