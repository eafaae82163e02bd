"""--shard K/N on an emulator engine, as a CI matrix runs it: two shard jobs and a merge give
the report of the unsharded run; the test ids of a shard are its cells only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, only_report, run_suites

# the venv may hold another checkout's harness (editable install): run this one
HERE = {"PYTHONPATH": str(REPO)}
GRID = ("--batch-sizes", "1,2", "--beam-widths", "1,2", "--max-new-tokens", "16", "--no-cache")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=900, env={**os.environ, **HERE})


def test_two_shard_jobs_merge_into_the_unsharded_report(tmp_path: Path, engine_factory, small_dataset):
    common = ("--engine", str(engine_factory(4, 2)), "--dataset", str(small_dataset), *GRID)
    whole = _cli("run", *common, "--report-dir", str(tmp_path / "whole"), cwd=tmp_path)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    shards = []
    for k in (1, 2):
        job = _cli("run", *common, "--shard", f"{k}/2", "--report-dir", str(tmp_path / f"s{k}"),
                   cwd=tmp_path)
        assert job.returncode == 0, job.stdout + job.stderr
        assert f"shard {k}/2: this shard's verdict only" in job.stdout
        shards.append(next((tmp_path / f"s{k}").iterdir()))
    reports = [json.loads((s / "report.json").read_text()) for s in shards]
    assert [r["shard"]["cells"] for r in reports] == [["bs1-beam1", "bs2-beam2"], ["bs2-beam1", "bs1-beam2"]]
    # each shard generated the batch-size-1 reference it needed but does not report it as a cell
    lines = [(s / "generations.jsonl").read_text().splitlines() for s in shards]
    assert any('"cell": "bs1-beam2"' in x for x in lines[0])
    assert any('"cell": "bs1-beam1"' in x for x in lines[1])

    merged = _cli("merge", *map(str, shards), "--output", str(tmp_path / "merged"), cwd=tmp_path)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "merged 2 shards; verdict: pass" in merged.stdout
    got = json.loads((tmp_path / "merged" / "report.json").read_text())
    want = only_report(tmp_path / "whole")
    assert [c["id"] for c in got["cells"]] == ["bs1-beam1", "bs2-beam1", "bs1-beam2", "bs2-beam2"]
    assert got["cells"] == want["cells"] and got["verdict"] == want["verdict"] == "pass"
    assert got["method"] == want["method"] and got["memory"] == want["memory"]
    assert ((tmp_path / "merged" / "generations.jsonl").read_text()
            == next((tmp_path / "whole").iterdir()).joinpath("generations.jsonl").read_text())
    assert got["timing"]["engine_calls"] == sum(r["timing"]["engine_calls"] for r in reports)


def test_shard_test_ids_are_its_cells_only(tmp_path: Path, engine_factory):
    proc = run_suites("--engine", str(engine_factory(4, 2)), "--batch-sizes", "1,2", "--beam-widths",
                      "1,2", "--shard", "2/2", "--collect-only", "-q", cwd=tmp_path, env=HERE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = sorted(line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line)
    assert ids == sorted(f"{t}[{c}]" for t in ("test_batch_positions", "test_engine_limits",
                                               "test_throughput") for c in ("bs2-beam1", "bs1-beam2"))
    bad = run_suites("--shard", "3/2", "--collect-only", "-q", cwd=tmp_path, env=HERE)
    assert bad.returncode == 4 and "--shard '3/2': K must be between 1 and N (2)" in bad.stderr
