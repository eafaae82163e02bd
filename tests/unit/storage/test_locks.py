from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from harness.storage.locks import file_lock, try_lock

HOLD = (
    "import sys, time; from pathlib import Path; from harness.storage.locks import file_lock\n"
    "with file_lock(Path(sys.argv[1]), purpose='test', shared=sys.argv[2] == 'shared'):\n"
    "    print('held', flush=True); time.sleep(float(sys.argv[3]))\n"
)


def _holder(path: Path, mode: str, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), mode, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_exclusive_lock_waits_and_names_the_holder(tmp_path: Path) -> None:
    lock = tmp_path / "sub" / ".lock"
    proc = _holder(lock, "exclusive", 1.0)
    said: list[str] = []
    t0 = time.monotonic()
    with file_lock(lock, purpose="writing goldens", say=said.append):
        waited = time.monotonic() - t0
    proc.wait()
    assert waited > 0.5
    assert said == [f"waiting for the lock on {lock} held by pid {proc.pid} (writing goldens)"]
    assert lock.read_text().strip() == str(os.getpid())  # the last holder, for the next message


def test_shared_holders_do_not_wait_for_each_other_but_exclusive_does(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    proc = _holder(lock, "shared", 1.0)
    said: list[str] = []
    with file_lock(lock, purpose="cache", shared=True, say=said.append):
        assert said == []
        with try_lock(lock) as taken:
            assert taken is False  # someone holds it shared: no exclusive clean-up now
    proc.wait()
    with try_lock(lock) as taken:
        assert taken is True


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    proc = _holder(lock, "exclusive", 60)
    proc.kill()
    proc.wait()
    with try_lock(lock) as taken:
        assert taken is True
