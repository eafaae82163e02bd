"""This process's rank and the run's world size, from the launcher's environment.

A TensorRT-LLM engine built with tp_size x pp_size > 1 runs one process per rank under MPI
(``mpirun -n WORLD pytest suites/ --engine DIR``): every rank drives the runner through the
same batches, rank 0 holds the outputs, scores them and writes the report. Launchers name
their variables differently; the first one found wins:

- Open MPI: OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE
- MPICH, Intel MPI (Hydra): PMI_RANK / PMI_SIZE
- PMIx launchers: PMIX_RANK (the size comes from the launcher's other variables)
- Slurm ``srun``: SLURM_PROCID / SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), only inside an
  ``srun`` step (SLURM_STEP_ID set): a batch script holds SLURM_NTASKS of the whole
  allocation while running a single process
- torchrun: RANK / WORLD_SIZE
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from harness.errors import ConfigError
from harness.model.ranks import Ranks

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK")
SIZE_VARS = (
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "PMIX_SIZE",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
    "WORLD_SIZE",
)
_SLURM = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")


def _first(names: tuple[str, ...], env: Mapping[str, str]) -> tuple[str, str] | None:
    for name in names:
        if name in _SLURM and "SLURM_STEP_ID" not in env:
            continue
        value = env.get(name, "").strip()
        if value:
            return name, value
    return None


def current(environ: Mapping[str, str] | None = None) -> Ranks:
    """Rank and world size from the environment (rank 0 of 1 when no launcher is found)."""
    env = os.environ if environ is None else environ
    size_found, rank_found = _first(SIZE_VARS, env), _first(RANK_VARS, env)
    if size_found is None and rank_found is None:
        return Ranks()
    values: dict[str, int] = {}
    for what, found, low in (("world size", size_found, 1), ("rank", rank_found, 0)):
        if found is None:
            continue
        name, text = found
        if not text.isdigit() or int(text) < low:
            raise ConfigError(
                f"environment variable {name}={text!r}: the {what} must be an "
                f"integer >= {low}; fix the launcher's environment"
            )
        values[what] = int(text)
    world, rank = values.get("world size", 1), values.get("rank", 0)
    names = " and ".join(found[0] for found in (rank_found, size_found) if found)
    if rank >= world:
        raise ConfigError(
            f"environment: rank {rank} is not below the world size {world} "
            f"({names}); fix the launcher's environment"
        )
    return Ranks(rank=rank, world_size=world, source=names)


def world_size(environ: Mapping[str, str] | None = None) -> int:
    """Processes in this run (1 when alone)."""
    return current(environ).world_size


def engine_ranks(tp_size: int | None, pp_size: int | None) -> int:
    """Processes an engine needs: tp_size x pp_size (1 when the config records neither)."""
    return (tp_size or 1) * (pp_size or 1)


def require_world(ranks: Ranks, tp_size: int | None, pp_size: int | None, *, engine: str) -> None:
    """Stop before any generation when the processes do not match the engine's mapping."""
    need = engine_ranks(tp_size, pp_size)
    if ranks.world_size == need:
        return
    mapping = (
        f"mapped to tp {tp_size or 1} x pp {pp_size or 1} = {need} rank(s)"
        if tp_size is not None or pp_size is not None
        else "not mapped to several ranks (its config records no tp/pp mapping: 1 rank)"
    )
    have = "a single process" if ranks.world_size == 1 else f"{ranks.world_size} processes ({ranks.source})"
    if need == 1:
        fix = "run it without mpirun/srun (one process)"
    else:
        fix = (
            f"run one process per rank: mpirun -n {need} pytest suites/ --engine {engine} "
            f"(or mpirun -n {need} python -m harness run --engine {engine})"
        )
    raise ConfigError(f"--engine {engine}: the engine is {mapping} but this run has {have}; {fix}")
