"""One error hierarchy. Every message names the file, option or key and what to do."""

from __future__ import annotations

from harness.outside import clean


class HarnessError(Exception):
    """A problem the user can fix; shown as one message, never as a traceback. The message
    often quotes outside text (a server's answer, a file's content, a path): it is shown
    cleaned (``harness.outside``: secrets redacted, control characters escaped) wherever it
    is printed or embedded in another message."""

    def __str__(self) -> str:
        return clean(super().__str__())


class ConfigError(HarnessError):
    """A bad option value or a bad combination of options."""


class DatasetError(HarnessError):
    """The dataset cannot be read or lacks the fields the run needs."""


class EngineError(HarnessError):
    """The engine directory or backend cannot be loaded."""


class GoldensError(HarnessError):
    """Goldens are missing, corrupt, or recorded for another run."""


class StorageError(HarnessError):
    """A file could not be written (disk full, folder removed or read-only)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during generation; the message says what was kept and how to resume."""


RESUME = ("rerun the same command to resume: batches in the generation cache are not "
          "generated again")


def interrupted(exc: KeyboardInterrupt) -> str:
    """The one line a Ctrl-C ends with: what was kept and how to resume."""
    if isinstance(exc, Interrupted) and str(exc):
        return str(exc)
    return ("interrupted: every batch generated so far is kept in the generation cache (unless "
            f"--no-cache) and the cells completed so far in the run's generations.jsonl; {RESUME}")


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message ("" when it has none)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return ""


def describe(exc: BaseException) -> str:
    """``Type: first line`` of an exception, for one-line messages (``Type`` alone when the
    message is empty)."""
    text = first_line(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
