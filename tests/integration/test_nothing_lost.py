"""Nothing lost, nothing half-written (issue #7 item 3).

Runs killed with SIGKILL during generation and during ``--update-goldens``; two runs at once
on one cache and one goldens folder; the lock's waiting message.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from harness.__main__ import main
from harness.storage.atomic import TEMP_NAME
from harness.storage.goldens import JOURNAL_FILE, LOCK_FILE, GoldensStore
from harness.storage.locks import file_lock
from tests.integration.common import EngineFactory, grid_options
from tests.processes import checkout_env, harness_command, start

HERE = Path(__file__).resolve().parent
TOY = ["--engine", "fault_engines:Echo", "--batch-sizes", "1,2", "--beam-widths", "1,2"]
Recorded = tuple[Path, dict[str, bytes], dict[str, bytes]]  # the goldens folder, its files before, after


def _harness(
    *args: str, env: dict[str, str] | None = None, script: list[str] | None = None
) -> subprocess.Popen[str]:
    """`python -m harness ARGS` (``script``: the script, in its place) in a process of its
    own, with the fault engines importable and ``env`` set."""
    cmd = [sys.executable, *script, *args] if script else harness_command(*args)
    return start(cmd, env=checkout_env(HERE, **(env or {})))


def _kill_when(proc: subprocess.Popen[str], ready: Callable[[], bool], timeout: float = 120) -> None:
    """SIGKILL ``proc`` as soon as ``ready()`` holds (fails if it ends first)."""
    end = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"ended before the kill: {proc.communicate()}"
        assert time.monotonic() < end, "never became ready"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def _cache_files(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*.json") if not p.name.startswith(".")]


def _comparable(report_dir: Path) -> dict[str, Any]:
    """report.json without what differs between equal runs (times, paths, cache counts)."""
    [path] = report_dir.glob("*/report.json")
    report = json.loads(path.read_text(encoding="utf-8"))
    keep = {k: report[k] for k in ("verdict", "cells", "baseline", "goldens", "method", "limits", "memory")}
    keep["dataset"] = {k: v for k, v in report["dataset"].items() if k != "path"}
    keep["engine"] = report["engine"]["identity"]
    return keep


@pytest.mark.slow  # three runs of the emulator, 48 batches each
def test_sigkill_during_generation_then_the_rerun_equals_an_uninterrupted_run(
    tmp_path: Path, engine_factory: EngineFactory, small_dataset: Path
) -> None:
    engine = engine_factory(8, 4)
    args = [
        "run",
        "--engine",
        str(engine),
        "--dataset",
        str(small_dataset),
        "--num-prompts",
        "8",
        "--batch-sizes",
        "1,2,4",
        "--beam-widths",
        "1,2",
        "--max-new-tokens",
        "8",
    ]
    cache = tmp_path / "cache"
    killed = _harness(*args, "--cache-dir", str(cache), "--report-dir", str(tmp_path / "killed"))
    _kill_when(killed, lambda: len(_cache_files(cache)) >= 12)  # of 48 batches
    assert not list((tmp_path / "killed").glob("*/report.json"))  # no report claims completeness

    rerun = _harness(*args, "--cache-dir", str(cache), "--report-dir", str(tmp_path / "rerun"))
    whole = _harness(
        *args, "--cache-dir", str(tmp_path / "fresh-cache"), "--report-dir", str(tmp_path / "whole")
    )
    for proc in (rerun, whole):
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out + err
        assert "Traceback" not in err
    [report] = (tmp_path / "rerun").glob("*/report.json")
    counts = json.loads(report.read_text())["cache"]
    assert counts["batches_from_cache"] >= 12 and counts["batches_generated"] > 0  # resumed
    assert _comparable(tmp_path / "rerun") == _comparable(tmp_path / "whole")
    strays = [p for p in cache.rglob(".*") if TEMP_NAME.match(p.name)]
    assert not strays  # the killed run's half-written temporary file was removed


def _update_goldens(dataset: Path, goldens: Path, reports: Path) -> list[str]:
    """`run --update-goldens` of the Echo engine: its arguments."""
    return [
        "run",
        *TOY,
        "--dataset",
        str(dataset),
        "--update-goldens",
        "--goldens-dir",
        str(goldens),
        "--report-dir",
        str(reports),
    ]


def _record(goldens: Path, reports: Path, dataset: Path, variant: str = "") -> None:
    out = io.StringIO()
    env = {"FAULT_VARIANT": variant}
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(out), redirect_stderr(out):
        mp.syspath_prepend(str(HERE))
        for k, v in env.items():
            mp.setenv(k, v)
        code = main(_update_goldens(dataset, goldens, reports))
    assert code == 0, out.getvalue()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != LOCK_FILE
    }


@pytest.fixture(scope="module")
def goldens_before_and_after(tmp_path_factory: pytest.TempPathFactory, small_dataset: Path) -> Recorded:
    """Goldens recorded by Echo, and what an uninterrupted re-recording with FAULT_VARIANT=new
    writes (the outputs differ, so a half-done update shows)."""
    tmp = tmp_path_factory.mktemp("goldens")
    _record(tmp / "old", tmp / "r", small_dataset)
    _record(tmp / "new", tmp / "r", small_dataset, variant="new")
    old, new = _snapshot(tmp / "old"), _snapshot(tmp / "new")
    assert len(old) == 2 and old.keys() == new.keys() and old != new
    return tmp / "old", old, new


def _put(folder: Path, files: dict[str, bytes]) -> None:
    """The files (relative paths and contents) written under ``folder``."""
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


@pytest.mark.slow
def test_sigkill_while_update_goldens_generates_keeps_the_goldens(
    tmp_path: Path, small_dataset: Path, goldens_before_and_after: Recorded
) -> None:
    source, old, _ = goldens_before_and_after
    goldens = tmp_path / "goldens"
    goldens.mkdir()
    _put(goldens, old)
    proc = _harness(
        *_update_goldens(small_dataset, goldens, tmp_path / "r"),
        env={"FAULT_VARIANT": "new", "FAULT_SLEEP": "0.05"},
    )
    log = tmp_path / "r"
    _kill_when(proc, lambda: any(p.stat().st_size for p in log.glob("*/generations.jsonl")))
    assert _snapshot(goldens) == old


@pytest.mark.slow  # a process started and killed per step
@pytest.mark.parametrize(
    "step, expect",
    [
        (1, "old"),  # before the journal is renamed into place: the commit never happened
        (2, "new"),  # journal committed, no file renamed yet
        (3, "new"),  # one file renamed, the other not: mixed on disk until the next run rolls forward
        (4, "new"),  # every file renamed, the journal not yet removed
    ],
)
def test_sigkill_at_each_step_of_the_goldens_update(
    tmp_path: Path, small_dataset: Path, goldens_before_and_after: Recorded, step: int, expect: str
) -> None:
    _, old, new = goldens_before_and_after
    goldens = tmp_path / "goldens"
    _put(goldens, old)
    proc = _harness(
        *_update_goldens(small_dataset, goldens, tmp_path / "r"),
        env={"FAULT_VARIANT": "new", "CRASH_DIR": str(goldens), "CRASH_AT": str(step)},
        script=[str(HERE / "crash_at.py")],
    )
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    if step == 3:
        mixed = _snapshot(goldens)
        assert sum(mixed[k] == new[k] for k in new) == 1 and (goldens / JOURNAL_FILE).exists()
    GoldensStore(goldens).recover()  # what the next run does first
    assert _snapshot(goldens) == (old if expect == "old" else new)
    assert not [p for p in goldens.rglob(".*") if TEMP_NAME.match(p.name)]  # no temporaries left


@pytest.mark.slow
def test_a_goldens_writer_waits_for_the_lock_and_says_who_holds_it(
    tmp_path: Path, small_dataset: Path
) -> None:
    goldens = tmp_path / "goldens"
    reports = tmp_path / "r"
    with file_lock(goldens / LOCK_FILE, purpose="test"):
        proc = _harness(*_update_goldens(small_dataset, goldens, reports))
        end = time.monotonic() + 120
        while not list(reports.glob("*/generations.jsonl")) or proc.poll() is not None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end
            time.sleep(0.05)
        time.sleep(1.5)  # generation of this tiny run is over; it now waits for the lock
        assert proc.poll() is None and not list(goldens.glob("*/*.json"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert f"waiting for the lock on {goldens / LOCK_FILE} held by pid {os.getpid()} (writing goldens)" in err
    assert len(list(goldens.glob("*/*.json"))) == 2


@pytest.mark.slow
def test_two_runs_at_once_share_a_cache_and_goldens(tmp_path: Path, small_dataset: Path) -> None:
    """Same cache (the engine has a directory, so batches are cached), same goldens folder,
    same report folder, started together: both succeed, each has its own report folder,
    every cache file and every goldens file is whole."""
    engine_dir = tmp_path / "toy-engine"
    engine_dir.mkdir()
    (engine_dir / "weights.txt").write_text("toy")
    args = [
        "run",
        "--backend",
        "fault_engines:Echo",
        "--engine",
        str(engine_dir),
        *grid_options(small_dataset, "1,2", "1,2"),
        "--update-goldens",
        "--goldens-dir",
        str(tmp_path / "goldens"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--report-dir",
        str(tmp_path / "r"),
    ]
    procs = [_harness(*args, env={"FAULT_SLEEP": "0.01"}) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
    folders = sorted((tmp_path / "r").glob("*/report.json"))
    assert len(folders) == 2
    cells = [json.loads(p.read_text())["cells"] for p in folders]
    assert cells[0] == cells[1]
    for file in _cache_files(tmp_path / "cache"):
        assert isinstance(json.loads(file.read_text())["outputs"], list)
    goldens = list((tmp_path / "goldens").glob("*/*.json"))
    assert len(goldens) == 2 and all(json.loads(p.read_text())["schema_version"] == 1 for p in goldens)


def test_report_folders_of_runs_started_the_same_second_differ(tmp_path: Path) -> None:
    import datetime as dt

    from harness.engines.base import EngineInfo
    from harness.storage.folders import new_report_dir

    started = dt.datetime(2030, 1, 1, 12, 0, 0)
    info = EngineInfo(backend="emulator", path="e", identity="x")
    made: list[Path] = []
    threads = [
        threading.Thread(target=lambda: made.append(new_report_dir(tmp_path, info.backend, started)))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 8 and all(p.parent == tmp_path for p in made)
