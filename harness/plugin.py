"""pytest wiring only: options, one pipeline run per session, per-cell tests, summary.

Registered through the ``pytest11`` entry point (and by the repository's conftest.py for
runs from a checkout). Inert unless a collected test asks for ``harness_cell``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.config import OPTIONS, RunConfig
from harness.errors import HarnessError, exit_status, interrupted
from harness.outside import clean, cleaned
from harness.stop_signals import stop_signals

if TYPE_CHECKING:
    from harness.engines.base import Engine
    from harness.model.cell import Cell
    from harness.model.limits import LimitCheck
    from harness.model.ranks import Ranks
    from harness.model.report import CellResult
    from harness.pipeline import RunOutcome
    from harness.progress import ProgressFactory
    from harness.stages.plan_only import PlanOnly
    from harness.stages.run import FollowerRun, Prepared

DEST_PREFIX = "harness_"
# a test that asks for one of these needs the engine loaded (and, for results, generating)
ENGINE_FIXTURES = {"harness_cell_result", "harness_result", "harness_prepared", "harness_engine"}
# a test that asks for one of these makes the session a harness run (plan, limits, engine)
HARNESS_FIXTURES = ENGINE_FIXTURES | {"harness_cell"}
# a pytest-xdist worker's word to the controller (config.workeroutput) that it refused to run
XDIST_REFUSED = "batch_position_harness_refused"
XDIST_LINE = (
    "pytest suites/ runs one generation for the whole grid and writes one report, so "
    "pytest-xdist would run all of it in every worker; drop -n (pytest-xdist): to "
    "spread a run over GPUs, give each job one --shard K/N and merge their reports "
    "(docs/ci.md)"
)
CELLS_SHOWN = 8  # cell ids a selection line names before "and N more"


@dataclass
class HarnessState:
    """Per-session state, kept in ``config.stash``."""

    run_config: RunConfig
    cells: list[Cell] | None = None
    error: str | None = None
    prepared: Prepared | None = None
    planned: PlanOnly | None = None  # the plan and limit checks alone, when nothing generates
    result: RunOutcome | FollowerRun | None = None
    engine: Engine | None = None  # a second engine, loaded after the run closed the first
    signals: ExitStack = field(default_factory=ExitStack)  # SIGTERM/SIGHUP handlers, restored at the end


STATE = pytest.StashKey[HarnessState]()


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
    config.stash[STATE] = HarnessState(run_config=run_config)


def _say(reporter: pytest.TerminalReporter, line: str, **markup: bool) -> None:
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


def _xdist_worker(config: pytest.Config) -> bool:
    """True in a pytest-xdist worker process (xdist gives each its ``workerinput``)."""
    return hasattr(config, "workerinput")


def _fixture_uses(items: Iterable[pytest.Item]) -> list[set[str]]:
    """The fixtures each test that will run asks for (a test marked skip runs none of them:
    the throughput tests when benchmarks are not asked for)."""
    return [
        set(getattr(item, "fixturenames", ())) for item in items if item.get_closest_marker("skip") is None
    ]


def _harness_run(items: Iterable[pytest.Item]) -> bool:
    """True when the session plans, checks or generates: a test asks for a harness fixture."""
    return any(names & HARNESS_FIXTURES for names in _fixture_uses(items))


def pytest_collection_finish(session: pytest.Session) -> None:
    state = _state(session.config)
    if _xdist_worker(session.config) and _harness_run(session.items):
        # refused here, said once by the controller (pytest_testnodedown), which collects nothing
        session.config.workeroutput[XDIST_REFUSED] = XDIST_LINE  # type: ignore[attr-defined]
        session.shouldstop = XDIST_LINE
        return
    if state.error:
        raise pytest.UsageError(state.error)
    line = _selection_line(session.items, state)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:
        reporter.write_line(line, yellow=True)
    if session.config.option.collectonly and state.cells:
        _dry_run(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist's controller, as a worker ends: a worker that refused (see XDIST_LINE)
    ends the session with one line, as a usage error (exit 4)."""
    refused = (getattr(node, "workeroutput", None) or {}).get(XDIST_REFUSED)
    if refused:
        raise pytest.UsageError(refused)


def _cell_ids(cells: Sequence[Cell]) -> str:
    """The cells' ids, the first CELLS_SHOWN of them and how many more."""
    shown = ", ".join(c.id for c in cells[:CELLS_SHOWN])
    more = len(cells) - CELLS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _selection_line(items: Sequence[pytest.Item], state: HarnessState) -> str | None:
    """What a selection (-k, -m, --lf, --deselect, test ids) does to a harness run, when it
    leaves a per-cell test with only some of the run's cells: which cells are tested, and that
    generation and report still cover every cell (the plan does not follow the selection)."""
    if not state.cells:
        return None
    picked: dict[str, set[Cell]] = {}  # test function -> the cells it runs for
    for item in items:
        callspec = getattr(item, "callspec", None)
        cell = callspec.params.get("harness_cell") if callspec is not None else None
        if cell is not None and item.get_closest_marker("skip") is None:
            picked.setdefault(getattr(item, "originalname", item.name), set()).add(cell)
    every = len(state.cells)
    partial: dict[tuple[Cell, ...], list[str]] = {}  # the same cells: named once
    for name, cells in picked.items():
        if cells != set(state.cells):
            partial.setdefault(tuple(c for c in state.cells if c in cells), []).append(name)
    if not partial:
        return None
    tested = ", ".join(
        f"{' and '.join(names)} {'run' if len(names) > 1 else 'runs'} for "
        f"{len(cells)} of the {every} cells ({_cell_ids(cells)})"
        for cells, names in partial.items()
    )
    if any("harness_cell_result" in names for names in _fixture_uses(items)):
        rest = (
            f"the engine still generates all {every} cells and the report covers them all; "
            "only the selected tests pass or fail in this session (to generate fewer cells: "
            "--batch-sizes, --beam-widths)"
        )
    else:
        rest = "no selected test needs outputs, so nothing is generated"
    return f"selection (-k, -m, --lf, --deselect or test ids): {tested}; {rest}"


def _dry_run(config: pytest.Config) -> None:
    """--collect-only: what the run would cost and check, without loading the engine."""
    from harness.report.estimate import estimate_line

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
    return progress_factory(
        lambda line: _say(reporter, line), terminal=terminal, quiet=config.get_verbosity() < 0
    )


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
            _say(
                reporter,
                state.planned.plan.describe() + "; the engine is not loaded: only "
                "its build limits are checked",
            )
            if warning:
                _say(reporter, warning, yellow=True)
    return state.planned


def _run(config: pytest.Config) -> RunOutcome | FollowerRun:
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
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """Preflight, then run the engine once, before the per-cell tests, so bad input stops the
    session early and limit failures show before any GPU time is spent. Generation runs only
    when a positions test is selected. From here to the session's end SIGTERM and SIGHUP end
    it as Ctrl-C does (harness.stop_signals)."""
    config = session.config
    if config.option.collectonly:
        return None
    if XDIST_REFUSED in getattr(config, "workeroutput", {}):
        return True  # this xdist worker runs nothing (pytest_collection_finish)
    if not _harness_run(session.items):
        return None
    state = _state(config)
    state.signals.enter_context(stop_signals())
    uses = _fixture_uses(session.items)
    try:
        if any(names & ENGINE_FIXTURES for names in uses):
            _prepare(config)
        elif any("harness_cell" in names for names in uses):  # limits only: no engine to load
            _planned(config)
        if any("harness_cell_result" in names for names in uses):
            _run(config)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: one line saying what was kept
        pytest.exit(interrupted(exc), returncode=exit_status(exc))
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(STATE, None)
    if state is not None:  # the signal handlers as they were before the run
        state.signals.close()


def _record(node: pytest.Item, pairs: Iterable[tuple[str, object]]) -> None:
    """Add JUnit properties (--junitxml, CI dashboards) to a test's ``user_properties``, each
    value a plain str, int, float or bool: an enum as its word, anything else as its text.
    Reports cross processes (execnet, which carries pytest-xdist's, serializes plain types
    only: an enum was a DumpError), so this is the one place that adds them."""
    for name, value in pairs:
        node.user_properties.append((name, plain(value)))


def plain(value: object) -> str | int | float | bool:
    """``value`` as a plain str, int, float or bool (exactly those types, not subclasses)."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def _skip_unless_root(ranks: Ranks) -> None:
    """Under MPI only rank 0 asserts: the other ranks' per-cell tests are skipped, so that
    mpirun's exit status is rank 0's verdict."""
    if not ranks.is_root:
        pytest.skip(
            f"{ranks.label}: this rank drives the engine; rank 0 scores, asserts and writes the report"
        )


@pytest.fixture(scope="session")
def harness_result(request: pytest.FixtureRequest) -> RunOutcome:
    """The session's single pipeline run (rank 0's; other ranks skip, see _skip_unless_root)."""
    from harness.pipeline import RunOutcome

    result = _run(request.config)
    _skip_unless_root(_prepare(request.config).ranks)
    assert isinstance(result, RunOutcome)  # rank 0: other ranks skipped above
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
            state.engine = load_engine(cfg.engine, cfg.backend, options=cfg.engine_options, roots=cfg.roots)
        except HarnessError as exc:
            raise pytest.UsageError(str(exc)) from None
        request.addfinalizer(lambda: guard.close(state.engine))
    return state.engine


@pytest.fixture
def harness_cell_checks(request: pytest.FixtureRequest, harness_cell: Cell) -> tuple[LimitCheck, ...]:
    """The build-limit checks of this test's cell (from config.json; nothing generated): those
    of the loaded engine when the session loads it, else those made without loading it."""
    from harness.limits.ranks import current

    prepared = _state(request.config).prepared
    _skip_unless_root(prepared.ranks if prepared is not None else current())
    # cleaned: a failing check's message reaches the terminal, and its JUnit properties a file
    checks = cleaned(
        (prepared.checks if prepared is not None else _planned(request.config).checks)[harness_cell]
    )
    _record(request.node, [(f"limit_{c.name}", c.status) for c in checks])
    return checks


@pytest.fixture
def harness_cell_result(
    request: pytest.FixtureRequest, harness_result: RunOutcome, harness_cell: Cell
) -> CellResult:
    """The result of the cell this test is parametrized with, cleaned: its error and messages
    reach the terminal (the test's failure) and its JUnit properties a file."""
    for c in harness_result.report.cells:
        if c.cell == harness_cell:
            c = cleaned(c)
            props: list[tuple[str, object]] = [
                ("cell", c.id),
                ("verdict", c.verdict),
                ("report", clean(str(harness_result.folder))),
            ]
            if c.positions:
                props.append(("degraded_positions", ",".join(map(str, c.degraded_positions))))
                props += [
                    (f"quality_position_{s.position}", f"{s.quality:.4f}")
                    for s in c.positions
                    if s.quality is not None
                ]
                props += [(f"agreement_position_{s.position}", f"{s.agreement:.4f}") for s in c.positions]
            _record(request.node, props)
            return c
    raise LookupError(harness_cell)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
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
    for line in [
        *header_lines(report),
        legend(report),
        *cell_lines(report),
        *drift_lines(report),
        *footer_lines(report, result.folder),
    ]:
        _say(tr, line)
