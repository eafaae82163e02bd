"""Rank and world size from each launcher's variables, and the world/mapping check."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.limits.ranks import current, engine_ranks, require_world, world_size
from harness.model.ranks import Ranks
from tests.processes import LAUNCHER_ENV


@pytest.mark.parametrize(
    "env, rank, world",
    [
        ({}, 0, 1),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, 1, 2),
        ({"PMI_RANK": "3", "PMI_SIZE": "4"}, 3, 4),
        (
            {
                "PMIX_RANK": "1",
                "SLURM_PROCID": "1",
                "SLURM_STEP_ID": "0",
                "SLURM_STEP_NUM_TASKS": "2",
                "SLURM_NTASKS": "8",
            },
            1,
            2,
        ),
        ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}, 1, 2),
        ({"RANK": "1", "WORLD_SIZE": "2"}, 1, 2),
        ({"OMPI_COMM_WORLD_SIZE": "4"}, 0, 4),
        # mpirun inside a Slurm allocation: Open MPI's variables win over the allocation's
        (
            {
                "OMPI_COMM_WORLD_RANK": "0",
                "OMPI_COMM_WORLD_SIZE": "2",
                "SLURM_PROCID": "0",
                "SLURM_NTASKS": "8",
                "SLURM_STEP_ID": "0",
            },
            0,
            2,
        ),
        # a plain `pytest` in an sbatch script: SLURM_NTASKS is the allocation's, not this run's
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "7"}, 0, 1),
    ],
)
def test_launchers(env: dict[str, str], rank: int, world: int) -> None:
    ranks = current(env)
    assert (ranks.rank, ranks.world_size) == (rank, world)
    assert ranks.is_root == (rank == 0)
    assert world_size(env) == world


def test_source_names_the_variables() -> None:
    ranks = current({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"})
    assert ranks.source == "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE"
    assert ranks.label == "rank 1 of 2"


@pytest.mark.parametrize(
    "env, words",
    [
        ({"OMPI_COMM_WORLD_SIZE": "two"}, "OMPI_COMM_WORLD_SIZE='two'"),
        ({"OMPI_COMM_WORLD_SIZE": "0"}, "integer >= 1"),
        ({"PMI_RANK": "2", "PMI_SIZE": "2"}, "rank 2 is not below the world size 2"),
    ],
)
def test_bad_environment_is_a_clear_error(env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        current(env)


def test_environment_is_read_when_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in LAUNCHER_ENV:
        monkeypatch.delenv(var, raising=False)
    assert current() == Ranks()
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "2")
    assert current() == Ranks(rank=1, world_size=2, source="PMI_RANK and PMI_SIZE")


def test_engine_ranks() -> None:
    assert engine_ranks(None, None) == 1
    assert engine_ranks(2, None) == 2 and engine_ranks(2, 2) == 4


def test_matching_world_passes() -> None:
    require_world(Ranks(0, 2, "x"), 2, 1, engine="e")
    require_world(Ranks(), 1, 1, engine="e")
    require_world(Ranks(), None, None, engine="e")


def test_tp2_engine_in_a_single_process_names_both_numbers_and_mpirun() -> None:
    with pytest.raises(ConfigError) as exc:
        require_world(Ranks(), 2, 1, engine="engines/tp2")
    message = str(exc.value)
    assert "mapped to tp 2 x pp 1 = 2 rank(s) but this run has a single process" in message
    assert "mpirun -n 2 pytest suites/ --engine engines/tp2" in message


def test_wrong_world_size_names_the_launcher_variables() -> None:
    with pytest.raises(ConfigError) as exc:
        require_world(Ranks(0, 4, "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE"), 2, 1, engine="E")
    assert "= 2 rank(s) but this run has 4 processes (OMPI_COMM_WORLD_RANK" in str(exc.value)
    assert "mpirun -n 2" in str(exc.value)


def test_single_rank_engine_under_mpirun() -> None:
    with pytest.raises(ConfigError, match="no tp/pp mapping.*2 processes.*without mpirun"):
        require_world(Ranks(0, 2, "PMI_RANK and PMI_SIZE"), None, None, engine="E")
