"""Outside text made safe where it leaves the process: the one gate for strings the harness
did not write itself (a server's answers and error bodies, an engine's exceptions, dataset
fields and names, model ids, paths, report files read back) on their way to a file or the
terminal.

``clean(text)`` is that gate for what people read: every secret redacted (``harness.redact``:
the API key, a server address's credentials and query values, ``sk-``/``Bearer`` tokens), and
every character that could rewrite a terminal or hide text shown as its Python escape
(``\\x1b``, ``\\r``, ``\\u202e``): C0 controls but tab and newline, DEL, C1 controls (``\\x9b``
starts an escape sequence on some terminals like ESC [), and the bidirectional overrides,
embeddings, isolates and marks that reorder what a reader sees. A server answering
``\\x1b[2K\\rverdict: pass`` can then neither erase nor forge a terminal line, nor put raw
escapes in report.html (which jinja2 also autoescapes: ``harness.report.html``).

Where it is applied, each once:

- every ``Report`` as it is sealed (``harness.report.serialize.seal``, the last step before
  report.json, report.md and report.html are written and the terminal summary is printed)
  and as it is read back (``load_report``: ``compare`` and ``merge`` show foreign files);
- the terminal: ``python -m harness`` writes through ``terminal()`` (stdout and stderr),
  the pytest plugin through ``clean`` before pytest's terminal writer, a failing cell's
  message and JUnit properties, and library warnings through ``say``;
- error messages: ``HarnessError`` shows its message cleaned (``harness.errors``), wherever it
  is printed or embedded;
- data files (generations.jsonl, goldens) get ``redact`` only: their texts are scored and
  compared, so control characters stay as generated (JSON escapes C0 there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from typing import IO, Any, TextIO, TypeVar, cast

from harness.redact import redact, redact_field

T = TypeVar("T")

# C0 but \t and \n; DEL and C1; ALM, LRM, RLM; line/paragraph separators; bidi embeddings,
# overrides and isolates
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    return ascii(match.group())[1:-1]  # \x1b, \r, \u202e


def neutralized(text: str) -> str:
    """``text`` with every control character but tab and newline, and every bidi control,
    shown as its escape."""
    return CONTROL.sub(_escape, text)


def clean(text: str) -> str:
    """Outside text as it may be shown or stored for people: secrets redacted, control and
    bidi characters shown as escapes (see the module docstring)."""
    return neutralized(redact(text)) if isinstance(text, str) and text else text


def cleaned(value: T, text: Callable[[str], str] = clean) -> T:
    """``value`` with ``text`` applied to every string in it: fields of dataclasses, items of
    tuples and lists, keys and values of dicts, a dict's value under a secret's name
    (``api_key``, ``password``: ``harness.redact.redact_field``) REDACTED whole; enum members,
    numbers and other objects stay as they are. The same object comes back where nothing
    changed."""
    return cast(T, _walk(value, text))


def _walk(value: object, text: Callable[[str], str]) -> object:
    if isinstance(value, Enum) or value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes: dict[str, object] = {}
        for f in dataclasses.fields(value):
            if f.init:
                old = getattr(value, f.name)
                new = _walk(old, text)
                if new is not old:
                    changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, (tuple, list)):
        items = [_walk(v, text) for v in value]
        if all(n is o for n, o in zip(items, value)):
            return value
        if hasattr(value, "_fields"):  # a named tuple, made again from its fields
            remade: object = getattr(value, "_make")(items)  # noqa: B009 (mypy sees a plain tuple)
            return remade
        return type(value)(items)
    if isinstance(value, dict):  # a value under a secret's name (api_key, password) is one
        pairs = [
            (_walk(k, text), text(redact_field(k, v)) if isinstance(v, str) else _walk(v, text))
            for k, v in value.items()
        ]
        if all(nk is k and nv is v for (nk, nv), (k, v) in zip(pairs, value.items())):
            return value
        return type(value)(pairs)
    return value


class TerminalStream:
    """A text stream that writes ``clean(text)`` to the stream it wraps (``unfiltered``);
    the rest (isatty, fileno, encoding, flush) is the wrapped stream's."""

    def __init__(self, stream: IO[str]) -> None:
        self.unfiltered = stream

    def write(self, text: str) -> int:
        self.unfiltered.write(clean(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, flush: the stream's own
        return getattr(self.unfiltered, name)


def unfiltered(stream: IO[str]) -> IO[str]:
    """The stream under a ``TerminalStream``: for output the harness composes wholly itself
    and that needs its control characters (the progress bar's carriage returns)."""
    return cast(IO[str], getattr(stream, "unfiltered", stream))


@contextlib.contextmanager
def terminal() -> Iterator[None]:
    """stdout and stderr through ``clean`` while the block runs (``python -m harness``)."""
    out = cast(TextIO, TerminalStream(sys.stdout))
    err = cast(TextIO, TerminalStream(sys.stderr))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield


def say(line: str, file: IO[str] | None = None) -> None:
    """Print one line (a warning, a wait) cleaned, to ``file`` (default stderr), flushed."""
    print(clean(line), file=file or sys.stderr, flush=True)
