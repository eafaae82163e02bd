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
    """Ctrl-C (or SIGTERM, SIGHUP) during generation; the message says what was kept and how
    to resume, and ``status`` is the exit status the signal asks for."""

    def __init__(self, message: str, status: int = 130) -> None:
        super().__init__(message)
        self.status = status


class Stopped(KeyboardInterrupt):
    """SIGTERM (a cancelled CI job) or SIGHUP (a closed terminal) while a run works: it ends
    as Ctrl-C ends it (harness.stop_signals), with 128 + the signal's number as exit status."""

    def __init__(self, name: str, number: int) -> None:
        super().__init__(name)
        self.name = name
        self.number = number


RESUME = "rerun the same command to resume: batches in the generation cache are not generated again"


def interrupted_by(exc: KeyboardInterrupt) -> str:
    """How an interruption's line starts: "interrupted" (Ctrl-C) or "interrupted by SIGTERM"."""
    return f"interrupted by {exc.name}" if isinstance(exc, Stopped) else "interrupted"


def exit_status(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 128 + the signal's number for SIGTERM (143) and SIGHUP (129)."""
    if isinstance(exc, Interrupted):
        return exc.status
    return 128 + exc.number if isinstance(exc, Stopped) else 130


def interrupted(exc: KeyboardInterrupt) -> str:
    """The one line an interruption ends with: what was kept and how to resume."""
    if isinstance(exc, Interrupted) and str(exc):
        return str(exc)
    return (
        f"{interrupted_by(exc)}: every batch generated so far is kept in the generation "
        "cache (unless --no-cache) and the cells completed so far in the run's "
        f"generations.jsonl; {RESUME}"
    )


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
