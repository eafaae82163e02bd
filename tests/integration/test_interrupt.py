"""Issue 15, class 6 (SIGINT): Ctrl-C in the middle of generating prints one line saying what
was kept (the generation cache, generations.jsonl so far) and how to resume, and exits 130,
for ``python -m harness run`` and ``pytest suites/``; the rerun resumes from the cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SUITES, user_env

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.slow  # two processes per case, the first slowed to be interrupted


def _command(kind: str, tmp: Path, dataset: Path) -> list[str]:
    engine = tmp / "echo-engine"
    engine.mkdir(exist_ok=True)
    (engine / "weights.bin").write_text("echo")  # a folder: the generation cache is on
    options = [
        "--engine",
        str(engine),
        "--backend",
        "fault_engines:Echo",
        "--dataset",
        str(dataset),
        "--batch-sizes",
        "1,2",
        "--beam-widths",
        "1",
        "--report-dir",
        str(tmp / "reports"),
        "--cache-dir",
        str(tmp / "cache"),
        "--goldens-dir",
        str(tmp / "goldens"),
    ]
    if kind == "run":
        return [sys.executable, "-m", "harness", "run", *options]
    return [sys.executable, "-m", "pytest", str(SUITES), "-p", "no:cacheprovider", "-q", *options]


def _interrupt(cmd: list[str], tmp: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Start, wait until the cache holds a few batches, then Ctrl-C (SIGINT)."""
    # Ctrl-C's default action even where this test runs in the background of a shell, which
    # starts background jobs with SIGINT ignored (Python then installs no handler for it)
    proc = subprocess.Popen(
        cmd,
        cwd=tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 600
    while len(list((tmp / "cache").rglob("*.json"))) < 3 and proc.poll() is None:
        assert time.monotonic() < deadline, "no batch reached the cache"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.parametrize("kind", ["run", "pytest"])
def test_ctrl_c_says_what_was_kept_and_exits_130(kind: str, tmp_path: Path, small_dataset: Path) -> None:
    env = {
        **user_env(),
        "FAULT_SLEEP": "0.5",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    done = _interrupt(_command(kind, tmp_path, small_dataset), tmp_path, env)
    text = done.stdout + done.stderr
    assert done.returncode == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    lines = [line for line in text.splitlines() if "interrupted:" in line]
    assert len(lines) == 1, text
    assert "batches generated this run are kept in the generation cache" in lines[0]
    assert "generations.jsonl" in lines[0] and "rerun the same command to resume" in lines[0]
    assert not list((tmp_path / "reports").glob("*/report.json"))

    env["FAULT_SLEEP"] = "0"  # the rerun asks the engine only for what is missing
    again = subprocess.run(
        _command(kind, tmp_path, small_dataset),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    [report] = (tmp_path / "reports").glob("*/report.json")
    assert json.loads(report.read_text())["cache"]["batches_from_cache"] >= 3
