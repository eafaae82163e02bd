"""One pytest session of the harness: what the plugin's hooks and fixtures delegate to.

It holds the session's state (the run's config, its cells, the prepared run or the plan
without an engine, the outcome) and does each thing once: plan, prepare, run, report on the
terminal. The heavy modules (engines, the pipeline) load only when a test asks for them, so
that every other pytest session pays nothing for the plugin.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

import pytest

from harness.config import RunConfig
from harness.errors import HarnessError
from harness.outside import clean, cleaned

if TYPE_CHECKING:
    from harness.engines.base import Engine
    from harness.model.cell import Cell
    from harness.model.limits import LimitCheck
    from harness.model.ranks import Ranks
    from harness.model.report import CellResult
    from harness.model.schedule import ScheduledCell
    from harness.pipeline import RunOutcome
    from harness.progress import ProgressFactory
    from harness.stages.plan_only import PlanOnly
    from harness.stages.run import FollowerRun, Prepared

# a test that asks for one of these needs the engine loaded (and, for results, generating)
ENGINE_FIXTURES = {
    "harness_cell_result",
    "harness_schedule_result",
    "harness_result",
    "harness_prepared",
    "harness_engine",
}
# a test that asks for one of these makes the session a harness run (plan, limits, engine)
HARNESS_FIXTURES = ENGINE_FIXTURES | {"harness_cell", "harness_schedule"}
CELLS_SHOWN = 8  # cell ids a selection line names before "and N more"


def fixture_uses(items: Iterable[pytest.Item]) -> list[set[str]]:
    """The fixtures each test that will run asks for (a test marked skip runs none of them:
    the throughput tests when benchmarks are not asked for)."""
    return [
        set(getattr(item, "fixturenames", ())) for item in items if item.get_closest_marker("skip") is None
    ]


def harness_run(items: Iterable[pytest.Item]) -> bool:
    """True when the session plans, checks or generates: a test asks for a harness fixture."""
    return any(names & HARNESS_FIXTURES for names in fixture_uses(items))


def plain(value: object) -> str | int | float | bool:
    """``value`` as a plain str, int, float or bool (exactly those types, not subclasses): JUnit
    properties cross processes (execnet, which carries pytest-xdist's, serializes plain types
    only)."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def record(node: pytest.Item, pairs: Iterable[tuple[str, object]]) -> None:
    """Add JUnit properties (--junitxml, CI dashboards) to a test's ``user_properties``, each a
    plain value: the one place that adds them."""
    for name, value in pairs:
        node.user_properties.append((name, plain(value)))


def _cell_ids(cells: Sequence[Cell]) -> str:
    """The cells' ids, the first CELLS_SHOWN of them and how many more."""
    shown = ", ".join(c.id for c in cells[:CELLS_SHOWN])
    more = len(cells) - CELLS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _usage(error: HarnessError) -> pytest.UsageError:
    """A harness error as pytest's usage error: one line, no traceback."""
    return pytest.UsageError(str(error))


@dataclass
class HarnessSession:
    """The harness's state in one pytest session (kept in ``config.stash``)."""

    config: pytest.Config
    run_config: RunConfig
    cells: list[Cell] | None = None
    error: str | None = None
    prepared: Prepared | None = None
    planned_only: PlanOnly | None = None  # the plan and limit checks alone, when nothing generates
    outcome: RunOutcome | FollowerRun | None = None
    engine: Engine | None = None  # a second engine, loaded after the run closed the first
    signals: ExitStack = field(default_factory=ExitStack)  # SIGTERM/SIGHUP handlers, restored at the end

    def say(self, line: str, **markup: bool) -> None:
        """One line through pytest's terminal writer, cleaned (``harness.outside``: secrets
        redacted, control characters escaped): the session's one way to the terminal."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(clean(line), **markup)

    def planned_cells(self) -> list[Cell]:
        """The cells of the run (the per-cell tests' parameters); an error is said once, after
        collection."""
        if self.cells is None:
            from harness.stages.prepare import planned_cells

            try:
                self.cells = planned_cells(self.run_config)
            except HarnessError as exc:
                self.cells, self.error = [], str(exc)
        return self.cells

    def planned_schedules(self) -> list[str]:
        """The ids of the run's scheduled cells (the schedule tests' parameters)."""
        from harness.model.schedule import schedule_id
        from harness.model.vocab import Schedule

        cells, options = self.planned_cells(), self.run_config.schedules
        if not cells or self.run_config.shard is not None:  # a shard's tests are its cells'
            return []
        concurrency = options.concurrency_for([c.batch_size for c in cells])
        return [
            schedule_id(s, concurrency, w)
            for w in self.run_config.beam_widths
            for s in options.schedules
            if s != Schedule.BULK
        ]

    def scheduled(self, outcome: RunOutcome, cell_id: str) -> ScheduledCell:
        """The scheduled cell a schedule test is parametrized with, as the run decided it."""
        found = [c for c in outcome.report.schedules if c.id == cell_id]
        if not found:
            pytest.fail(f"{cell_id}: the run has no such scheduled cell", pytrace=False)
        return found[0]

    def selection_line(self, items: Sequence[pytest.Item]) -> str | None:
        """What a selection (-k, -m, --lf, --deselect, test ids) does to a harness run, when it
        leaves a per-cell test with only some of the run's cells: which cells are tested, and
        that generation and report still cover every cell (the plan does not follow it)."""
        if not self.cells:
            return None
        picked: dict[str, set[Cell]] = {}  # test function -> the cells it runs for
        for item in items:
            callspec = getattr(item, "callspec", None)
            cell = callspec.params.get("harness_cell") if callspec is not None else None
            if cell is not None and item.get_closest_marker("skip") is None:
                picked.setdefault(getattr(item, "originalname", item.name), set()).add(cell)
        every = len(self.cells)
        partial: dict[tuple[Cell, ...], list[str]] = {}  # the same cells: named once
        for name, cells in picked.items():
            if cells != set(self.cells):
                partial.setdefault(tuple(c for c in self.cells if c in cells), []).append(name)
        if not partial:
            return None
        tested = ", ".join(
            f"{' and '.join(names)} {'run' if len(names) > 1 else 'runs'} for "
            f"{len(cells)} of the {every} cells ({_cell_ids(cells)})"
            for cells, names in partial.items()
        )
        if any("harness_cell_result" in names for names in fixture_uses(items)):
            rest = (
                f"the engine still generates all {every} cells and the report covers them all; "
                "only the selected tests pass or fail in this session (to generate fewer cells: "
                "--batch-sizes, --beam-widths)"
            )
        else:
            rest = "no selected test needs outputs, so nothing is generated"
        return f"selection (-k, -m, --lf, --deselect or test ids): {tested}; {rest}"

    def dry_run(self) -> None:
        """--collect-only: what the run would cost and check, without loading the engine."""
        from harness.report.estimate import estimate_line

        planned = self.planned(announce=False)
        try:
            estimate = estimate_line(self.run_config, planned.plan.sequences())
        except HarnessError as exc:
            raise _usage(exc) from None
        for line in [*planned.cost_lines(), *planned.limit_lines(), estimate]:
            self.say(line)

    def progress(self) -> ProgressFactory:
        """A bar on a terminal (none under -q); in a log, a line at a steady interval (none
        under -qq)."""
        from harness.progress import progress_factory

        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        terminal = sys.stderr.isatty()
        verbosity = self.config.get_verbosity()
        if reporter is None or (not terminal and verbosity < -1):
            return progress_factory(lambda line: None, terminal=True, quiet=True)
        return progress_factory(self.say, terminal=terminal, quiet=verbosity < 0)

    def _announce(self, plan_line: str, failures: Sequence[LimitCheck]) -> None:
        from harness.verdict.failures import preflight_line

        self.say(plan_line)
        warning = preflight_line(failures, "see test_engine_limits")
        if warning:
            self.say(warning, yellow=True)

    def prepare(self) -> Prepared:
        """The run prepared once: dataset, engine, plan, limit checks, goldens."""
        if self.prepared is None:
            from harness.stages.prepare import prepare

            try:
                self.prepared = prepare(self.run_config)
            except HarnessError as exc:
                raise _usage(exc) from None
            from harness.stages.schedules import schedules_line

            scheduled = schedules_line(self.run_config, self.prepared.plan)
            plan_line = self.prepared.plan.describe() + (f"\n{scheduled}" if scheduled else "")
            self._announce(plan_line, self.prepared.limit_failures())
        return self.prepared

    def planned(self, *, announce: bool = True) -> PlanOnly:
        """The plan and the limit checks from config.json, the dataset and the tokenizer files,
        without loading the engine (the limits tests need no more)."""
        if self.planned_only is None:
            from harness.stages.plan_only import plan_only

            try:
                self.planned_only = plan_only(self.run_config)
            except HarnessError as exc:
                raise _usage(exc) from None
            if announce:
                self._announce(
                    self.planned_only.plan.describe()
                    + "; the engine is not loaded: only its build limits are checked",
                    self.planned_only.limit_failures,
                )
        return self.planned_only

    def run(self) -> RunOutcome | FollowerRun:
        """The session's one pipeline run."""
        if self.outcome is None:
            from harness.pipeline import execute

            prepared = self.prepare()
            try:
                self.outcome = execute(prepared, progress=self.progress())
            except HarnessError as exc:
                raise _usage(exc) from None
        return self.outcome

    def before_tests(self, items: Sequence[pytest.Item]) -> None:
        """Preflight, then the run, before the per-cell tests, so bad input stops the session
        early and limit failures show before any GPU time is spent. Generation runs only when
        a positions test is selected."""
        uses = fixture_uses(items)
        if any(names & ENGINE_FIXTURES for names in uses):
            self.prepare()
        elif any("harness_cell" in names for names in uses):  # limits only: no engine to load
            self.planned()
        if any("harness_cell_result" in names for names in uses):
            self.run()

    def root_outcome(self) -> RunOutcome:
        """Rank 0's outcome (other ranks' tests are skipped: mpirun's exit status is rank 0's)."""
        from harness.pipeline import RunOutcome

        outcome = self.run()
        skip_unless_root(self.prepare().ranks)
        assert isinstance(outcome, RunOutcome)  # rank 0: other ranks skipped above
        return outcome

    def open_engine(self) -> tuple[Engine, bool]:
        """An open engine for tests that call it directly (throughput): the prepared one while
        the run has not closed it, else a fresh load of the same engine; and whether it is
        that fresh load (the caller closes it)."""
        prepared = self.prepare()
        if self.outcome is None:
            return prepared.engine, False
        if self.engine is None:
            from harness.engines.registry import load_engine

            cfg = self.run_config
            try:
                self.engine = load_engine(
                    cfg.engine, cfg.backend, options=cfg.engine_options, roots=cfg.roots
                )
            except HarnessError as exc:
                raise _usage(exc) from None
            return self.engine, True
        return self.engine, False

    def cell_checks(self, node: pytest.Item, cell: Cell) -> tuple[LimitCheck, ...]:
        """The build-limit checks of a cell (from config.json; nothing generated): those of the
        loaded engine when the session loads it, else those made without loading it; cleaned,
        since a failing check's message reaches the terminal and its JUnit properties a file."""
        from harness.limits.ranks import current

        prepared = self.prepared
        skip_unless_root(prepared.ranks if prepared is not None else current())
        checks = cleaned((prepared.checks if prepared is not None else self.planned().checks)[cell])
        record(node, [(f"limit_{c.name}", c.status) for c in checks])
        return checks

    def cell_result(self, node: pytest.Item, outcome: RunOutcome, cell: Cell) -> CellResult:
        """The result of one cell, cleaned: its error and messages reach the terminal (the
        test's failure) and its JUnit properties a file."""
        found = next((c for c in outcome.report.cells if c.cell == cell), None)
        if found is None:
            raise LookupError(cell)
        c = cleaned(found)
        props: list[tuple[str, object]] = [
            ("cell", c.id),
            ("verdict", c.verdict),
            ("report", clean(str(outcome.folder))),
        ]
        if c.positions:
            props.append(("degraded_positions", ",".join(map(str, c.degraded_positions))))
            props += [
                (f"quality_position_{s.position}", f"{s.quality:.4f}")
                for s in c.positions
                if s.quality is not None
            ]
            props += [(f"agreement_position_{s.position}", f"{s.agreement:.4f}") for s in c.positions]
        record(node, props)
        return c

    def summary(self) -> None:
        """The terminal summary of the run: its cells, findings and where the report is."""
        if self.outcome is None:
            return
        from harness.report.summary import (
            cell_lines,
            drift_lines,
            footer_lines,
            header_lines,
            legend,
            schedule_lines,
        )
        from harness.stages.run import FollowerRun

        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "batch-position harness")
        if isinstance(self.outcome, FollowerRun):
            self.say(self.outcome.message)
            return
        report = self.outcome.report
        for line in [
            *header_lines(report),
            legend(report),
            *cell_lines(report),
            *schedule_lines(report),
            *schedule_lines(report),
            *drift_lines(report),
            *footer_lines(report, self.outcome.folder),
        ]:
            self.say(line)


def skip_unless_root(ranks: Ranks) -> None:
    """Under MPI only rank 0 asserts: the other ranks' per-cell tests are skipped, so that
    mpirun's exit status is rank 0's verdict."""
    if not ranks.is_root:
        pytest.skip(
            f"{ranks.label}: this rank drives the engine; rank 0 scores, asserts and writes the report"
        )
