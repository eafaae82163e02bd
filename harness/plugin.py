"""pytest wiring only: options, per-cell test ids, fixtures and the terminal summary, each one
line into the session (``harness.session.HarnessSession``), which does the work.

Registered through the ``pytest11`` entry point (and by the repository's conftest.py for runs
from a checkout). Inert unless a collected test asks for a harness fixture.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.config import OPTIONS, RunConfig
from harness.errors import HarnessError, exit_status, interrupted
from harness.session import HarnessSession, harness_run, plain
from harness.stop_signals import stop_signals

if TYPE_CHECKING:
    from collections.abc import Iterator

    from harness.engines.base import Engine
    from harness.model.cell import Cell
    from harness.model.limits import LimitCheck
    from harness.model.report import CellResult
    from harness.model.schedule import ScheduledCell
    from harness.pipeline import RunOutcome
    from harness.stages.run import Prepared

__all__ = ["plain"]  # JUnit property values, as the session records them

DEST_PREFIX = "harness_"
# a pytest-xdist worker's word to the controller (config.workeroutput) that it refused to run
XDIST_REFUSED = "batch_position_harness_refused"
XDIST_LINE = (
    "pytest suites/ runs one generation for the whole grid and writes one report, so "
    "pytest-xdist would run all of it in every worker; drop -n (pytest-xdist): to "
    "spread a run over GPUs, give each job one --shard K/N and merge their reports "
    "(docs/ci.md)"
)
SESSION = pytest.StashKey[HarnessSession]()


def _session(config: pytest.Config) -> HarnessSession:
    return config.stash[SESSION]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("batch-position harness", "batch-position quality regression harness")
    for spec in OPTIONS:
        group.addoption(spec.flag, **spec.argument(DEST_PREFIX))


def pytest_configure(config: pytest.Config) -> None:
    values = {spec.dest: config.getoption(DEST_PREFIX + spec.dest) for spec in OPTIONS}
    try:
        run_config = RunConfig.from_options(values, root=Path(str(config.rootpath)))
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[SESSION] = HarnessSession(config, run_config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness_cell" in metafunc.fixturenames:
        cells = _session(metafunc.config).planned_cells()
        metafunc.parametrize("harness_cell", cells, ids=[c.id for c in cells])
    if "harness_schedule" in metafunc.fixturenames:
        ids = _session(metafunc.config).planned_schedules()
        if ids:  # none: the harness_schedule fixture skips, saying why
            metafunc.parametrize("harness_schedule", ids, ids=ids)


def pytest_collection_finish(session: pytest.Session) -> None:
    config, harness = session.config, _session(session.config)
    if hasattr(config, "workerinput") and harness_run(session.items):  # a pytest-xdist worker
        # refused here, said once by the controller (pytest_testnodedown), which collects nothing
        config.workeroutput[XDIST_REFUSED] = XDIST_LINE  # type: ignore[attr-defined]
        session.shouldstop = XDIST_LINE
        return
    if harness.error:
        raise pytest.UsageError(harness.error)
    line = harness.selection_line(session.items)
    if line:
        harness.say(line, yellow=True)
    if config.option.collectonly and harness.cells:
        harness.dry_run()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist's controller, as a worker ends: a worker that refused (see XDIST_LINE)
    ends the session with one line, as a usage error (exit 4)."""
    refused = (getattr(node, "workeroutput", None) or {}).get(XDIST_REFUSED)
    if refused:
        raise pytest.UsageError(refused)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """Preflight and the run before the per-cell tests; from here to the session's end SIGTERM
    and SIGHUP end it as Ctrl-C does (harness.stop_signals)."""
    config = session.config
    if config.option.collectonly or not harness_run(session.items):
        return None
    if XDIST_REFUSED in getattr(config, "workeroutput", {}):
        return True  # this xdist worker runs nothing (pytest_collection_finish)
    harness = _session(config)
    harness.signals.enter_context(stop_signals())
    try:
        harness.before_tests(session.items)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: one line saying what was kept
        pytest.exit(interrupted(exc), returncode=exit_status(exc))
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    harness = session.config.stash.get(SESSION, None)
    if harness is not None:  # the signal handlers as they were before the run
        harness.signals.close()


@pytest.fixture(scope="session")
def harness_result(request: pytest.FixtureRequest) -> RunOutcome:
    """The session's single pipeline run (rank 0's; other ranks skip)."""
    return _session(request.config).root_outcome()


@pytest.fixture(scope="session")
def harness_prepared(request: pytest.FixtureRequest) -> Prepared:
    """The session's preflight stage: config, dataset, plan (this shard's), prompts."""
    return _session(request.config).prepare()


@pytest.fixture(scope="session")
def harness_engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """An open engine for tests that call it directly (throughput), closed at session end when
    it was loaded for them."""
    from harness.engines import guard

    engine, fresh = _session(request.config).open_engine()
    yield engine
    if fresh:
        guard.close(engine)


@pytest.fixture
def harness_cell_checks(request: pytest.FixtureRequest, harness_cell: Cell) -> tuple[LimitCheck, ...]:
    """The build-limit checks of this test's cell."""
    return _session(request.config).cell_checks(request.node, harness_cell)


@pytest.fixture
def harness_cell_result(
    request: pytest.FixtureRequest, harness_result: RunOutcome, harness_cell: Cell
) -> CellResult:
    """The result of the cell this test is parametrized with."""
    return _session(request.config).cell_result(request.node, harness_result, harness_cell)


@pytest.fixture
def harness_schedule(request: pytest.FixtureRequest) -> str:
    """A run without scheduled cells (--schedules none, a --shard run): skipped with the reason."""
    if _session(request.config).run_config.shard is not None:
        pytest.skip("a --shard run leaves the schedules to an unsharded run (merge does not combine them)")
    pytest.skip("no scheduled cells: --schedules none")


@pytest.fixture
def harness_schedule_result(
    request: pytest.FixtureRequest, harness_result: RunOutcome, harness_schedule: str
) -> ScheduledCell:
    """The scheduled cell this test is parametrized with (by its id)."""
    return _session(request.config).scheduled(harness_result, harness_schedule)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    harness = config.stash.get(SESSION, None)
    if harness is not None:
        harness.summary()
