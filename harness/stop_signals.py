"""SIGTERM and SIGHUP end a run as Ctrl-C does.

A cancelled CI job gets SIGTERM, a closed terminal SIGHUP; their default action kills the
process where it stands, with no word and a report folder holding only generations.jsonl.
While ``stop_signals()`` is active both raise ``Stopped`` (a ``KeyboardInterrupt``) in the
main thread, so the run takes the Ctrl-C path: one line saying what was kept and how to
resume, and 128 + the signal's number as exit status. The handlers before it are restored
when it ends.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from harness.errors import Stopped

NAMES = ("SIGTERM", "SIGHUP")  # SIGINT already raises KeyboardInterrupt


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signal.Signals(signum).name, signum)


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Stopped`` while active (main thread only: Python runs
    signal handlers there; elsewhere nothing changes). A signal ignored when the process
    started (``nohup`` ignores SIGHUP) stays ignored."""
    previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}
    if threading.current_thread() is threading.main_thread():
        for name in NAMES:
            number = getattr(signal, name, None)  # Windows has no SIGHUP
            if number is None or signal.getsignal(number) == signal.SIG_IGN:
                continue
            try:
                previous[number] = signal.signal(number, _raise)
            except (OSError, ValueError):  # an embedding that does not allow it
                continue
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
