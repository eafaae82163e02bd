"""Issue 24, signals: SIGTERM (what a cancelled CI job gets) and SIGHUP (a closed terminal) in
the middle of generating end ``python -m harness run`` and ``pytest suites/`` as Ctrl-C does
(tests/integration/test_interrupt.py): one line saying what was kept (the generation cache,
generations.jsonl so far) and how to resume, 128 + the signal's number as exit status, no
traceback; before, the process died where it stood with no word."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import FrameType

import pytest

from tests.integration.test_interrupt import _command, _resumes, _slowed_env, _stop

# the signals' default actions in the child, whatever this test inherited (a shell's
# background job ignores SIGINT, nohup ignores SIGHUP)
DEFAULTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.mark.slow  # a process per case, slowed to be stopped in the middle
@pytest.mark.parametrize(
    "kind, sig",
    [("run", signal.SIGTERM), ("pytest", signal.SIGTERM), ("run", signal.SIGHUP)],
    ids=["run-SIGTERM", "pytest-SIGTERM", "run-SIGHUP"],
)
def test_sigterm_and_sighup_say_what_was_kept(
    kind: str, sig: signal.Signals, tmp_path: Path, small_dataset: Path
) -> None:
    env = _slowed_env()
    done = _stop(_command(kind, tmp_path, small_dataset), tmp_path, env, sig, DEFAULTS)
    text = done.stdout + done.stderr
    assert done.returncode == 128 + sig, text  # 143 for SIGTERM, 129 for SIGHUP
    assert "Traceback" not in text and "KeyboardInterrupt" not in text and "Stopped" not in text
    lines = [line for line in text.splitlines() if "interrupted" in line]
    assert len(lines) == 1, text
    line = lines[0]
    assert f"interrupted by {sig.name}:" in line
    assert "batches generated this run are kept in the generation cache" in line
    assert "generations.jsonl" in line and "rerun the same command to resume" in line
    [folder] = (tmp_path / "reports").iterdir()  # an unfinished run: no report, its cells so far
    assert not (folder / "report.json").exists()
    assert (folder / "generations.jsonl").exists()
    assert len(list((tmp_path / "cache").rglob("*.json"))) >= 3

    if kind == "run" and sig == signal.SIGTERM:  # the rerun resumes from the cache
        _resumes(kind, tmp_path, small_dataset, env)


def test_stop_signals_restores_the_handlers_before_it() -> None:
    """The handlers are the run's only while it runs; a signal ignored at start stays ignored."""
    from harness.errors import Stopped
    from harness.stop_signals import stop_signals

    def mine(signum: int, frame: FrameType | None) -> None:
        raise AssertionError("not while stop_signals is active")

    before_term = signal.signal(signal.SIGTERM, mine)
    before_hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with pytest.raises(Stopped) as stopped, stop_signals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
        assert (stopped.value.name, stopped.value.number) == ("SIGTERM", signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before_term)
        signal.signal(signal.SIGHUP, before_hup)
