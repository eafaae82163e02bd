"""``--batch-timeout``: a ``generate`` call that does not return in time fails its cell.

Python cannot stop a call that hangs inside an engine (a CUDA kernel, a dead server
connection, a deadlock), so each call runs in a daemon worker thread and the run stops
waiting for it after the timeout. What that means for the rest of the run:

- the hung call may keep running in the background; its result, if it ever comes, is
  thrown away; the process can still exit (the thread is a daemon);
- the cell whose batch timed out ends as an ``error`` at once: its remaining batches are
  not sent, since the engine is still busy with the hung one;
- the engine is never given two batches at once (engines keep state between calls, such as
  the emulator's KV cache): the next cell's first call waits up to one more timeout for the
  hung call to finish and then proceeds normally; if it is still running, the engine is
  taken as stuck and every later call fails at once with that reason (each later cell is an
  error), until the hung call returns. So a hung engine costs at most two timeouts, and the
  run still scores what it has and writes its report;
- ``close()`` is not passed on while a call is still running.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from harness.config import DecodingSettings
from harness.engines.base import AdoptedEngine, EngineBase, Generates, Generation, as_engine


class BatchTimeout(RuntimeError):
    """A generate call ran past --batch-timeout (the cell fails with this message)."""


class BatchTimeoutEngine(AdoptedEngine):
    """Wraps an engine so that every ``generate`` waits at most ``seconds``; its other
    methods and attributes are the engine's."""

    def __init__(self, engine: EngineBase | Generates, seconds: float) -> None:
        inner = as_engine(engine)
        super().__init__(inner, inner.info)
        self._inner = inner  # ``self.engine``, typed as the EngineBase it is
        self.seconds = seconds
        self._hung: threading.Thread | None = None
        self._hung_batch = ""
        self._stuck = False

    def _wait_for_hung_call(self) -> None:
        hung = self._hung
        if hung is None:
            return
        if hung.is_alive() and not self._stuck:
            hung.join(self.seconds)
            self._stuck = hung.is_alive()
        if hung.is_alive():
            raise BatchTimeout(
                f"not sent: the engine is still busy with the {self._hung_batch} that "
                f"passed --batch-timeout {self.seconds:g}s"
            )
        self._hung, self._stuck = None, False

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        self._wait_for_hung_call()
        results: list[list[Generation]] = []
        errors: list[BaseException] = []

        def call() -> None:
            try:
                results.append(self._inner.generate(prompts, settings))
            except BaseException as exc:  # handed to the waiting thread
                errors.append(exc)

        worker = threading.Thread(target=call, name="harness-generate", daemon=True)
        worker.start()
        worker.join(self.seconds)
        if worker.is_alive():
            self._hung = worker
            self._hung_batch = f"batch of {len(prompts)} at beam width {settings.beam_width}"
            raise BatchTimeout(
                f"generate did not return within --batch-timeout {self.seconds:g}s "
                f"({self._hung_batch}); the call may still be running, so the "
                "rest of this cell was not sent"
            )
        if errors:
            raise errors[0]
        return results[0]

    def close(self) -> None:
        if self._hung is not None and self._hung.is_alive():
            return  # closing under a running call could crash the engine; the process ends it
        super().close()
