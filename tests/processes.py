"""Processes the tests start as a user starts them: `python -m harness ARGS` and `pytest
suites/ ARGS`, importing this checkout's harness (not whichever copy is installed), and the
environment they are given."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from subprocess import PIPE

from harness.limits.ranks import RANK_VARS, SIZE_VARS

REPO = Path(__file__).resolve().parents[1]
SUITES = REPO / "suites"
# what pytest-xdist sets in a worker (pytest-benchmark, for one, turns itself off under it)
XDIST_WORKER_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")
# what a launcher (mpirun, srun, torchrun) sets that the harness reads as a rank and a world
# size: a test clears them so that its process, or its child, is a run of its own
LAUNCHER_ENV = (*RANK_VARS, *SIZE_VARS, "SLURM_STEP_ID")


def user_env() -> dict[str, str]:
    """This process's environment less what makes a pytest-xdist worker, for a `pytest`
    process that is a user's run of its own (pytest-benchmark turns itself off and warns
    under a worker's variables)."""
    return {k: v for k, v in os.environ.items() if k not in XDIST_WORKER_ENV}


def checkout_env(*folders: Path | str, **extra: str) -> dict[str, str]:
    """A user's environment (``user_env``) with ``extra`` set, and PYTHONPATH naming this
    checkout first, then ``folders`` (where test engines' modules live), then what it held."""
    env = {**user_env(), **extra}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), *(str(f) for f in folders), env.get("PYTHONPATH")) if p
    )
    return env


def harness_command(*args: str) -> list[str]:
    """`python -m harness ARGS` with this interpreter."""
    return [sys.executable, "-m", "harness", *args]


def suites_command(*args: str) -> list[str]:
    """`python -m pytest suites/ ARGS` with this interpreter, leaving no cache behind."""
    return [sys.executable, "-m", "pytest", str(SUITES), "-p", "no:cacheprovider", *args]


def finish(
    cmd: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``cmd`` run to its end (``env``: its whole environment, else this process's), its
    output kept as text."""
    return subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def start(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], object] | None = None,
) -> subprocess.Popen[str]:
    """``cmd`` started (``preexec_fn``: run in the child before it), its stdout and stderr
    piped as text, for a test that stops or kills it on the way."""
    return subprocess.Popen(
        list(cmd), cwd=cwd, env=env, stdout=PIPE, stderr=PIPE, text=True, preexec_fn=preexec_fn
    )


def run_harness(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`python -m harness ARGS` in a subprocess, as a user runs it, with ``env`` set."""
    return finish(harness_command(*args), cwd=cwd, env=checkout_env(**(env or {})), timeout=timeout)


def run_suites(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`pytest suites/ ARGS` in a subprocess, as a user runs it, with ``env`` set."""
    return finish(suites_command(*args), cwd=cwd, env=checkout_env(**(env or {})), timeout=1800)
