"""Issue 15, class 6 (SIGINT): Ctrl-C in the middle of generating prints one line saying what
was kept (the generation cache, generations.jsonl so far) and how to resume, and exits 130,
for ``python -m harness run`` and ``pytest suites/``; the rerun resumes from the cache."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.common import echo_options
from tests.processes import checkout_env, finish, harness_command, start, suites_command

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.slow  # two processes per case, the first slowed to be interrupted


def _command(kind: str, tmp: Path, dataset: Path) -> list[str]:
    options = echo_options(tmp, dataset, "1,2")
    if kind == "run":
        return harness_command("run", *options)
    return suites_command("-q", *options)


def _slowed_env() -> dict[str, str]:
    """The child's environment: this checkout and the fault engines, every engine call 0.5 s."""
    return checkout_env(HERE, FAULT_SLEEP="0.5")


def _stop(
    cmd: list[str], tmp: Path, env: dict[str, str], sig: int, defaults: tuple[signal.Signals, ...]
) -> subprocess.CompletedProcess[str]:
    """Start (``defaults``: signals given their default action in the child), wait until the
    cache holds a few batches, then send ``sig``."""

    def default_actions() -> None:
        for each in defaults:
            signal.signal(each, signal.SIG_DFL)

    proc = start(cmd, cwd=tmp, env=env, preexec_fn=default_actions)
    deadline = time.monotonic() + 600
    while len(list((tmp / "cache").rglob("*.json"))) < 3 and proc.poll() is None:
        assert time.monotonic() < deadline, "no batch reached the cache"
        time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _resumes(kind: str, tmp: Path, dataset: Path, env: dict[str, str]) -> None:
    """The same command again, unslowed, succeeds and takes the stopped run's batches from the cache."""
    env["FAULT_SLEEP"] = "0"  # the rerun asks the engine only for what is missing
    again = finish(_command(kind, tmp, dataset), cwd=tmp, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    [report] = (tmp / "reports").glob("*/report.json")
    assert json.loads(report.read_text())["cache"]["batches_from_cache"] >= 3


@pytest.mark.parametrize("kind", ["run", "pytest"])
def test_ctrl_c_says_what_was_kept_and_exits_130(kind: str, tmp_path: Path, small_dataset: Path) -> None:
    env = _slowed_env()
    # Ctrl-C's default action even where this test runs in the background of a shell, which
    # starts background jobs with SIGINT ignored (Python then installs no handler for it)
    done = _stop(_command(kind, tmp_path, small_dataset), tmp_path, env, signal.SIGINT, (signal.SIGINT,))
    text = done.stdout + done.stderr
    assert done.returncode == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    lines = [line for line in text.splitlines() if "interrupted:" in line]
    assert len(lines) == 1, text
    assert "batches generated this run are kept in the generation cache" in lines[0]
    assert "generations.jsonl" in lines[0] and "rerun the same command to resume" in lines[0]
    assert not list((tmp_path / "reports").glob("*/report.json"))
    _resumes(kind, tmp_path, small_dataset, env)
