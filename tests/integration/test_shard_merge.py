"""--shard K/N on an emulator engine, as a CI matrix runs it: two shard jobs and a merge give
the report of the unsharded run; the test ids of a shard are its cells only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.__main__ import main
from tests.conftest import SuitesRun, only_report
from tests.integration.common import EngineFactory, Suites

GRID = (
    "--batch-sizes",
    "1,2",
    "--beam-widths",
    "1,2",
    "--num-prompts",
    "8",
    "--max-new-tokens",
    "8",
    "--no-cache",
)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> SuitesRun:
    """`python -m harness ARGS` in this process: exit status and output."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return SuitesRun(code, out, err)


@pytest.mark.slow  # three runs of the emulator
def test_two_shard_jobs_merge_into_the_unsharded_report(
    tmp_path: Path,
    engine_factory: EngineFactory,
    small_dataset: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the fixed design: a sequential run's shards stop their cells apart, and merge adds them up
    common = ("--engine", str(engine_factory(4, 2)), "--dataset", str(small_dataset), *GRID, "--looks", "1")
    whole = _cli(capsys, "run", *common, "--report-dir", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stdout + whole.stderr
    shards = []
    for k in (1, 2):
        job = _cli(capsys, "run", *common, "--shard", f"{k}/2", "--report-dir", str(tmp_path / f"s{k}"))
        assert job.returncode == 0, job.stdout + job.stderr
        assert f"shard {k}/2 (cells " in job.stdout and "this shard's verdict only" in job.stdout
        shards.append(next((tmp_path / f"s{k}").iterdir()))
    reports = [json.loads((s / "report.json").read_text()) for s in shards]
    assert [r["shard"]["cells"] for r in reports] == [["bs1-beam1", "bs2-beam2"], ["bs2-beam1", "bs1-beam2"]]
    # each shard generated the batch-size-1 reference it needed but does not report it as a cell
    lines = [(s / "generations.jsonl").read_text().splitlines() for s in shards]
    assert any('"cell": "bs1-beam2"' in x for x in lines[0])
    assert any('"cell": "bs1-beam1"' in x for x in lines[1])

    merged = _cli(capsys, "merge", *map(str, shards), "--output", str(tmp_path / "merged"))
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "merged 2 shards; verdict: pass" in merged.stdout
    got = json.loads((tmp_path / "merged" / "report.json").read_text())
    want = only_report(tmp_path / "whole")
    assert [c["id"] for c in got["cells"]] == ["bs1-beam1", "bs2-beam1", "bs1-beam2", "bs2-beam2"]
    assert got["cells"] == want["cells"] and got["verdict"] == want["verdict"] == "pass"
    assert got["method"] == want["method"] and got["memory"] == want["memory"]
    assert (tmp_path / "merged" / "generations.jsonl").read_text() == next(
        (tmp_path / "whole").iterdir()
    ).joinpath("generations.jsonl").read_text()
    assert got["timing"]["engine_calls"] == sum(r["timing"]["engine_calls"] for r in reports)


def test_shard_test_ids_are_its_cells_only(engine_factory: EngineFactory, suites: Suites) -> None:
    proc = suites(
        "--engine",
        str(engine_factory(4, 2)),
        "--batch-sizes",
        "1,2",
        "--beam-widths",
        "1,2",
        "--shard",
        "2/2",
        "--collect-only",
        "-q",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = sorted(line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line)
    # its cells, and the engine-wide test over them (the shard's verdict, as its cells', is provisional)
    assert ids == sorted(
        [
            f"{t}[{c}]"
            for t in ("test_batch_positions", "test_engine_limits", "test_throughput")
            for c in ("bs2-beam1", "bs1-beam2")
        ]
        + ["test_engine_wide", "test_schedules"]  # skipped: the schedules are an unsharded run's
    )
    bad = suites("--shard", "3/2", "--collect-only", "-q")
    assert bad.returncode == 4 and "--shard '3/2': K must be between 1 and N (2)" in bad.stderr
