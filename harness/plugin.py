"""pytest wiring only: options, one pipeline run per session, per-cell tests, summary.

Registered through the ``pytest11`` entry point (and by the repository's conftest.py for
runs from a checkout). Inert unless a collected test asks for ``harness_cell``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.config import OPTIONS, RunConfig
from harness.errors import HarnessError, interrupted
from harness.outside import clean, cleaned

if TYPE_CHECKING:
    from harness.engines.base import Engine
    from harness.engines.ranks import Ranks
    from harness.model.cell import Cell
    from harness.model.limits import LimitCheck
    from harness.model.report import CellResult
    from harness.progress import ProgressFactory
    from harness.stages.plan_only import PlanOnly
    from harness.stages.run import FollowerRun, Prepared, RunResult

DEST_PREFIX = "harness_"
# a test that asks for one of these needs the engine loaded (and, for results, generating)
ENGINE_FIXTURES = {"harness_cell_result", "harness_result", "harness_prepared", "harness_engine"}


@dataclass
class HarnessState:
    """Per-session state, kept in ``config.stash``."""

    run_config: RunConfig
    cells: list[Cell] | None = None
    error: str | None = None
    prepared: Prepared | None = None
    planned: PlanOnly | None = None  # the plan and limit checks alone, when nothing generates
    result: RunResult | FollowerRun | None = None
    engine: Engine | None = None  # a second engine, loaded after the run closed the first


STATE = pytest.StashKey[HarnessState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("batch-position harness", "batch-position quality regression harness")
    for spec in OPTIONS:
        kwargs: dict[str, Any] = {"dest": DEST_PREFIX + spec.dest, "help": spec.help}
        if spec.action == "store_true":
            kwargs.update(action=spec.action, default=spec.default)
        else:  # a value, or one value per occurrence (action "append")
            kwargs.update(type=spec.type or str, default=None, metavar=spec.metavar)
            if spec.action:
                kwargs["action"] = spec.action
        group.addoption(spec.flag, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    values = {spec.dest: config.getoption(DEST_PREFIX + spec.dest) for spec in OPTIONS}
    try:
        run_config = RunConfig.from_options(values, root=Path(str(config.rootpath)))
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[STATE] = HarnessState(run_config=run_config)


def _say(reporter: Any, line: str, **markup: bool) -> None:
    """One line through pytest's terminal writer, cleaned (``harness.outside``: secrets
    redacted, control characters escaped): the plugin's one way to the terminal. (Error
    messages are HarnessErrors, which show themselves cleaned.)"""
    reporter.write_line(clean(line), **markup)


def _state(config: pytest.Config) -> HarnessState:
    return config.stash[STATE]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness_cell" not in metafunc.fixturenames:
        return
    state = _state(metafunc.config)
    if state.cells is None:
        from harness.stages.prepare import planned_cells

        try:
            state.cells = planned_cells(state.run_config)
        except HarnessError as exc:  # reported once, after collection
            state.cells, state.error = [], str(exc)
    metafunc.parametrize("harness_cell", state.cells, ids=[c.id for c in state.cells])


def pytest_collection_finish(session: pytest.Session) -> None:
    state = _state(session.config)
    if state.error:
        raise pytest.UsageError(state.error)
    if session.config.option.collectonly and state.cells:
        _dry_run(session.config)


def _dry_run(config: pytest.Config) -> None:
    """--collect-only: what the run would cost and check, without loading the engine."""
    from harness.stages.plan_only import estimate_line

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    planned = _planned(config, announce=False)
    if reporter is None:
        return
    try:
        estimate = estimate_line(_state(config).run_config, planned.plan.sequences())
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    for line in [*planned.cost_lines(), *planned.limit_lines(), estimate]:
        _say(reporter, line)


def _progress_factory(config: pytest.Config) -> ProgressFactory:
    """A bar on a terminal (none under -q); in a log, a line at a steady interval (none
    under -qq)."""
    from harness.progress import progress_factory

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    terminal = sys.stderr.isatty()
    if reporter is None or (not terminal and config.get_verbosity() < -1):
        return progress_factory(lambda line: None, terminal=True, quiet=True)
    return progress_factory(lambda line: _say(reporter, line), terminal=terminal,
                            quiet=config.get_verbosity() < 0)


def _prepare(config: pytest.Config) -> Prepared:
    state = _state(config)
    if state.prepared is None:
        from harness.stages.prepare import prepare

        try:
            state.prepared = prepare(state.run_config)
        except HarnessError as exc:
            raise pytest.UsageError(str(exc)) from None
        from harness.verdict.failures import preflight_line

        reporter = config.pluginmanager.get_plugin("terminalreporter")
        warning = preflight_line(state.prepared.limit_failures(), "see test_engine_limits")
        if reporter is not None:
            _say(reporter, state.prepared.plan.describe())
            if warning:
                _say(reporter, warning, yellow=True)
    return state.prepared


def _planned(config: pytest.Config, *, announce: bool = True) -> PlanOnly:
    """The plan and the limit checks from config.json, the dataset and the tokenizer files,
    without loading the engine (the limits tests need no more)."""
    state = _state(config)
    if state.planned is None:
        from harness.stages.plan_only import plan_only
        from harness.verdict.failures import preflight_line

        try:
            state.planned = plan_only(state.run_config)
        except HarnessError as exc:
            raise pytest.UsageError(str(exc)) from None
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        warning = preflight_line(state.planned.limit_failures, "see test_engine_limits")
        if reporter is not None and announce:
            _say(reporter, state.planned.plan.describe() + "; the engine is not loaded: only "
                 "its build limits are checked")
            if warning:
                _say(reporter, warning, yellow=True)
    return state.planned


def _run(config: pytest.Config) -> RunResult | FollowerRun:
    state = _state(config)
    if state.result is None:
        from harness.pipeline import execute

        prepared = _prepare(config)
        try:
            state.result = execute(prepared, progress=_progress_factory(config))
        except HarnessError as exc:
            raise pytest.UsageError(str(exc)) from None
    return state.result


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Preflight, then run the engine once, before the per-cell tests, so bad input stops the
    session early and limit failures show before any GPU time is spent. Generation runs only
    when a positions test is selected."""
    if session.config.option.collectonly:
        return
    uses = [set(getattr(item, "fixturenames", ())) for item in session.items
            if item.get_closest_marker("skip") is None]  # e.g. throughput tests not asked for
    try:
        if any(names & ENGINE_FIXTURES for names in uses):
            _prepare(session.config)
        elif any("harness_cell" in names for names in uses):  # limits only: no engine to load
            _planned(session.config)
        if any("harness_cell_result" in names for names in uses):
            _run(session.config)
    except KeyboardInterrupt as exc:  # Ctrl-C: one line saying what was kept, exit 130
        pytest.exit(interrupted(exc), returncode=130)


def _skip_unless_root(ranks: Ranks) -> None:
    """Under MPI only rank 0 asserts: the other ranks' per-cell tests are skipped, so that
    mpirun's exit status is rank 0's verdict."""
    if not ranks.is_root:
        pytest.skip(f"{ranks.label}: this rank drives the engine; rank 0 scores, "
                    "asserts and writes the report")


@pytest.fixture(scope="session")
def harness_result(request: pytest.FixtureRequest) -> RunResult:
    """The session's single pipeline run (rank 0's; other ranks skip, see _skip_unless_root)."""
    from harness.stages.run import RunResult

    result = _run(request.config)
    _skip_unless_root(_prepare(request.config).ranks)
    assert isinstance(result, RunResult)  # rank 0: other ranks skipped above
    return result


@pytest.fixture(scope="session")
def harness_prepared(request: pytest.FixtureRequest) -> Prepared:
    """The session's preflight stage: config, dataset, plan (this shard's), prompts."""
    return _prepare(request.config)


@pytest.fixture(scope="session")
def harness_engine(request: pytest.FixtureRequest) -> Engine:
    """An open engine for tests that call it directly (throughput): the prepared one while
    the run has not closed it, else a fresh load of the same engine, closed at session end."""
    state = _state(request.config)
    prepared = _prepare(request.config)
    if state.result is None:
        return prepared.engine
    if state.engine is None:
        from harness.engines import guard
        from harness.engines.registry import load_engine

        try:
            cfg = state.run_config
            state.engine = load_engine(cfg.engine, cfg.backend, options=cfg.engine_options(),
                                       roots=cfg.roots)
        except HarnessError as exc:
            raise pytest.UsageError(str(exc)) from None
        request.addfinalizer(lambda: guard.close(state.engine))
    return state.engine


@pytest.fixture
def harness_cell_checks(request: pytest.FixtureRequest, harness_cell: Cell) -> tuple[LimitCheck, ...]:
    """The build-limit checks of this test's cell (from config.json; nothing generated): those
    of the loaded engine when the session loads it, else those made without loading it."""
    from harness.engines.ranks import current

    prepared = _state(request.config).prepared
    _skip_unless_root(prepared.ranks if prepared is not None else current())
    # cleaned: a failing check's message reaches the terminal, and its JUnit properties a file
    checks = cleaned((prepared.checks if prepared is not None else
                      _planned(request.config).checks)[harness_cell])
    for c in checks:  # JUnit properties, for CI dashboards (--junitxml)
        request.node.user_properties.append((f"limit_{c.name}", c.status))
    return checks


@pytest.fixture
def harness_cell_result(request: pytest.FixtureRequest, harness_result: RunResult,
                        harness_cell: Cell) -> CellResult:
    """The result of the cell this test is parametrized with, cleaned: its error and messages
    reach the terminal (the test's failure) and its JUnit properties a file."""
    for c in harness_result.cells:
        if c.cell == harness_cell:
            c = cleaned(c)
            props = request.node.user_properties
            props += [("cell", c.id), ("verdict", str(c.verdict)),
                      ("report", clean(str(harness_result.report_dir)))]
            if c.positions:
                props.append(("degraded_positions", ",".join(map(str, c.degraded_positions))))
                props += [(f"quality_position_{s.position}", f"{s.quality:.4f}")
                          for s in c.positions if s.quality is not None]
                props += [(f"agreement_position_{s.position}", f"{s.agreement:.4f}")
                          for s in c.positions]
            return c
    raise LookupError(harness_cell)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or state.result is None:
        return
    from harness.report.summary import cell_lines, drift_lines, footer_lines, header_lines, legend
    from harness.stages.run import FollowerRun

    result = state.result
    tr = terminalreporter
    tr.write_sep("=", "batch-position harness")
    if isinstance(result, FollowerRun):
        _say(tr, result.message)
        return
    report = result.report
    assert report is not None
    for line in [*header_lines(report), legend(report), *cell_lines(report), *drift_lines(report),
                 *footer_lines(report, result.report_dir)]:
        _say(tr, line)
