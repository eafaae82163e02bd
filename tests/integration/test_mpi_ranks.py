"""Multi-GPU engines under MPI, with the launcher's environment set as mpirun sets it.

There is no MPI here: each rank is a `pytest suites/` (or `python -m harness run`) process
started with OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE, which is all mpirun gives a rank
that the harness reads. The engine is an emulator engine whose config.json claims tp_size 2
(the emulator loader does not read the mapping), logging every generate call per rank.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import only_report
from tests.integration.common import EngineFactory, cli_options
from tests.processes import LAUNCHER_ENV, checkout_env, finish, suites_command

HERE = Path(__file__).resolve().parent
FAST = ("--batch-sizes", "1,2", "--beam-widths", "1,2", "--max-new-tokens", "6", "--num-prompts", "4")


@pytest.fixture(scope="module")
def tp2_engine(tmp_path_factory: pytest.TempPathFactory, engine_factory: EngineFactory) -> Path:
    """An emulator engine whose config.json says tp_size 2 (as a 2-GPU TensorRT-LLM build)."""
    target = tmp_path_factory.mktemp("tp2") / "engine"
    shutil.copytree(engine_factory(2, 2), target)
    config = json.loads((target / "config.json").read_text())
    config["pretrained_config"]["mapping"] = {"world_size": 2, "tp_size": 2, "pp_size": 1}
    (target / "config.json").write_text(json.dumps(config, indent=1))
    return target


def _options(tmp_path: Path, engine: Path, small_dataset: Path) -> list[str]:
    """What `pytest suites/` and `run` are given alike: the engine, dataset and report folder."""
    return [*cli_options(engine, small_dataset, tmp_path / "r"), *FAST]


def _env(tmp_path: Path, rank: int | None, world: int | None) -> dict[str, str]:
    env = checkout_env(HERE, RANK_ENGINE_LOG=str(tmp_path / "calls"))
    env = {k: v for k, v in env.items() if k not in LAUNCHER_ENV}
    if rank is not None:
        env.update(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(world))
    return env


def _suites(
    tmp_path: Path, engine: Path, small_dataset: Path, rank: int | None, world: int | None, *extra: str
) -> subprocess.CompletedProcess[str]:
    cmd = suites_command(
        "-rs", "-v", "--backend", "rank_engine:RecordingEngine", *_options(tmp_path, engine, small_dataset)
    )
    return finish([*cmd, *extra], cwd=tmp_path, env=_env(tmp_path, rank, world))


def _calls(tmp_path: Path, rank: int) -> list[dict[str, Any]]:
    path = tmp_path / f"calls.rank{rank}"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow  # a process per rank
def test_every_rank_drives_the_engine_only_rank_0_scores(
    tmp_path: Path, tp2_engine: Path, small_dataset: Path
) -> None:
    follower = _suites(tmp_path, tp2_engine, small_dataset, 1, 2)
    out = follower.stdout + follower.stderr
    assert follower.returncode == 0, out[-3000:]
    assert "rank 1 of 2: this rank drives the engine; rank 0 scores, asserts and writes the report" in out
    assert "passed" not in out.splitlines()[-1] and "failed" not in out.splitlines()[-1]
    # 4 cells x (limits, positions, throughput), engine-wide, 4 schedules x 2 beam widths
    assert "21 skipped" in out.splitlines()[-1]
    assert "rank 1 of 2: drove the engine through" in out
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").glob("*/report.json"))

    root = _suites(tmp_path, tp2_engine, small_dataset, 0, 2)
    assert root.returncode == 0, (root.stdout + root.stderr)[-3000:]
    assert "9 passed" in root.stdout  # 4 cells x (limits, positions), the engine-wide test
    report = only_report(tmp_path / "r")
    assert report["verdict"] == "pass" and report["ranks"] == {
        "rank": 0,
        "world_size": 2,
        "source": "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE",
    }
    assert report["limits"]["tp_size"] == 2
    assert report["cache"]["reason"].startswith("off (MPI world of 2")
    checks = {c["name"]: c for cell in report["cells"] for c in cell["limit_checks"]}
    assert checks["ranks"]["status"] == "pass"

    rank0, rank1 = _calls(tmp_path, 0), _calls(tmp_path, 1)
    assert len(rank0) == 16  # 4 cells x 4 batches (4 prompts, each at every position once)
    assert [(c["beam_width"], c["prompts"]) for c in rank0] == [
        (c["beam_width"], c["prompts"]) for c in rank1
    ]


@pytest.mark.slow
def test_single_process_on_a_tp2_engine_stops_before_generating(
    tmp_path: Path, tp2_engine: Path, small_dataset: Path
) -> None:
    proc = _suites(tmp_path, tp2_engine, small_dataset, None, None)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert (
        f"--engine {tp2_engine}: the engine is mapped to tp 2 x pp 1 = 2 rank(s) but this run "
        "has a single process"
    ) in out
    assert f"mpirun -n 2 pytest suites/ --engine {tp2_engine}" in out
    assert "Traceback" not in out
    assert _calls(tmp_path, 0) == [] and not list((tmp_path / "r").glob("*/report.json"))


@dataclass(frozen=True)
class Launcher:
    """The launcher fixture: this process as one rank of an mpirun job (``rank``), running
    `python -m harness run` in it (``cli``) on the dataset, its report in tmp / "r"."""

    tmp: Path
    dataset: Path
    monkeypatch: pytest.MonkeyPatch

    def rank(self, rank: int, world: int) -> None:
        self.monkeypatch.setenv("OMPI_COMM_WORLD_RANK", str(rank))
        self.monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", str(world))

    def cli(self, engine: Path, *extra: str) -> int:
        from harness.__main__ import main

        return main(["run", *_options(self.tmp, engine, self.dataset), *extra])


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_dataset: Path) -> Launcher:
    """No launcher's variables yet (``Launcher.rank`` sets them), the engine's calls logged."""
    for var in LAUNCHER_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK_ENGINE_LOG", str(tmp_path / "calls"))
    return Launcher(tmp_path, small_dataset, monkeypatch)


def test_cli_follower_exits_0_without_a_report(
    tmp_path: Path, tp2_engine: Path, launcher: Launcher, capsys: pytest.CaptureFixture[str]
) -> None:
    launcher.rank(1, 2)
    assert launcher.cli(tp2_engine, "--backend", "tests.integration.rank_engine:RecordingEngine") == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("rank 1 of 2: drove the engine through 16 batches (24 sequences)")
    assert len(_calls(tmp_path, 1)) == 16
    assert not list((tmp_path / "r").glob("*/report.json"))


def test_cli_wrong_world_size_exits_2(
    tp2_engine: Path, launcher: Launcher, capsys: pytest.CaptureFixture[str]
) -> None:
    launcher.rank(0, 4)
    assert launcher.cli(tp2_engine) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "= 2 rank(s) but this run has 4 processes (OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE)" in line
    assert "mpirun -n 2 python -m harness run" in line


def test_single_gpu_engine_under_mpirun_is_an_error(
    engine_factory: EngineFactory, launcher: Launcher, capsys: pytest.CaptureFixture[str]
) -> None:
    launcher.rank(0, 2)
    assert launcher.cli(engine_factory(2, 2)) == 2
    err = capsys.readouterr().err
    assert "mapped to tp 1 x pp 1 = 1 rank(s) but this run has 2 processes" in err
    assert "without mpirun" in err
