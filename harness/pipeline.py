"""The whole run, one way: prepare -> generate -> score -> analyse -> report.

``run(config)`` is what both the pytest plugin and ``python -m harness run`` call; this
module only calls the stages (``harness.stages``, ``harness.report``) in order and returns
the report they produced. docs/architecture.md shows the flow.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.config import RunConfig
from harness.engines import guard
from harness.errors import Interrupted, StorageError
from harness.model.analysis import FollowUp
from harness.model.report import Report, Timing
from harness.progress import ProgressFactory
from harness.report.build import build_report
from harness.report.files import write_report
from harness.stages.analyse import analyse
from harness.stages.follow_up import follow_up
from harness.stages.generate import follow, generate_all, interrupted
from harness.stages.prepare import prepare
from harness.stages.record import record_goldens
from harness.stages.run import Baseline, FollowerRun, Generated, Prepared, Scored
from harness.stages.schedules import run_schedules
from harness.stages.score import EarlyScorer, baselines, score_all
from harness.stages.sequential import looks, run_looks
from harness.storage.folders import new_report_dir
from harness.storage.generations import GenerationsLog
from harness.storage.goldens import GoldenSet
from harness.verdict.schedules import Flights
from harness.verdict.sequential import look_alpha

__all__ = ["FollowerRun", "RunOutcome", "execute", "prepare", "run"]


@dataclass(frozen=True)
class RunOutcome:
    """A finished run (rank 0's): its sealed report and the folder it was written to."""

    report: Report
    folder: Path


def run(
    config: RunConfig, *, progress: ProgressFactory | None = None, engine: object | None = None
) -> RunOutcome | FollowerRun:
    """Run the pipeline once and write the report; raises HarnessError for bad input.
    Under MPI, ranks other than 0 return a FollowerRun (see ``execute``)."""
    return execute(prepare(config, engine=engine), progress=progress)


def _close(prep: Prepared) -> None:
    guard.close(prep.engine)
    guard.close(prep.golden_engine)


def _generate(
    prep: Prepared,
    progress: ProgressFactory | None,
    timing: Timing,
    early: EarlyScorer | None,
    log: GenerationsLog,
) -> tuple[Generated, dict[int, GoldenSet], tuple[str, ...], StorageError | None]:
    """Generate every cell (and record goldens when asked); on an error the engines are closed
    here, else by the caller once the follow-up is done. Goldens that cannot be written come
    back as the error, raised once the report is kept."""
    unsaved = None
    try:
        t_gen = time.perf_counter()
        generated = generate_all(prep, progress, timing=timing, on_cell=early.add if early else None, log=log)
        timing.generate_stage_s = time.perf_counter() - t_gen
        goldens, written = dict(prep.goldens), list[str]()
        if prep.config.update_goldens:
            try:
                goldens, written = record_goldens(prep, generated, timing)
            except StorageError as exc:
                unsaved = exc
    except BaseException as exc:
        if early:
            early.close()
        log.close()
        _close(prep)
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Interrupted):
            raise interrupted(prep, log, exc) from None
        raise
    return generated, goldens, tuple(written), unsaved


@contextmanager
def _closing(prep: Prepared, log: GenerationsLog) -> Iterator[None]:
    """The engines and generations.jsonl closed whatever happens; Ctrl-C (or SIGTERM) said as
    what is kept and how to resume."""
    try:
        yield
    except KeyboardInterrupt as exc:
        if isinstance(exc, Interrupted):
            raise
        raise interrupted(prep, log, exc) from None
    finally:
        log.close()
        _close(prep)


def _follow_up(
    prep: Prepared,
    generated: Generated,
    bases: dict[int, Baseline],
    scored: Scored,
    progress: ProgressFactory | None,
    timing: Timing,
    log: GenerationsLog,
) -> tuple[Generated, Scored, FollowUp | None, Flights]:
    """The sparse screen's follow-up and the scheduled cells; then the engines and
    generations.jsonl are closed."""
    with _closing(prep, log):
        t_gen = time.perf_counter()
        generated, scored, followed = follow_up(prep, generated, bases, scored, progress, timing, log)
        timing.generate_stage_s += time.perf_counter() - t_gen
        return generated, scored, followed, run_schedules(prep, generated, bases, timing)


def _sequential(
    prep: Prepared, progress: ProgressFactory | None, timing: Timing, log: GenerationsLog, folder: Path
) -> RunOutcome:
    """A full rotation generated look by look (``--looks``), decided over what it generated at
    the last look's share of alpha; the engines and generations.jsonl closed whatever happens."""
    with _closing(prep, log):
        t_gen = time.perf_counter()
        generated, bases, scored, record = run_looks(prep, progress, timing, log)
        timing.generate_stage_s = time.perf_counter() - t_gen
        scheduled = run_schedules(prep, generated, bases, timing)
    t_after = time.perf_counter()
    decision = analyse(
        prep,
        generated,
        scored,
        alpha=look_alpha(prep.config.alpha, record.looks, record.looks),
        looked=record,
        flights=scheduled,
    )
    now = time.perf_counter()
    timing.after_generation_s = now - t_after
    timing.harness_total_s = now - prep.t0
    report = build_report(prep, generated, bases, scored, decision, timing=timing, sequential=record)
    return RunOutcome(write_report(report, folder), folder)


def execute(
    prep: Prepared, *, progress: ProgressFactory | None = None, overlap: bool = True
) -> RunOutcome | FollowerRun:
    """Generate every planned batch, score, decide and write the report (rank 0); other
    ranks only generate, in step (``follow``).

    With ``overlap`` each cell is scored in a worker thread as soon as it and its baseline
    exist, while the engine generates the next cells; the scores are the same as scoring
    afterwards (same function, same texts). The decision waits for every cell (Holm's
    correction spans all tests). Runs that record goldens score afterwards: their baseline
    exists only once the run is complete.
    """
    if not prep.ranks.is_root:
        return follow(prep, progress)
    timing = dataclasses.replace(prep.timing)
    folder = new_report_dir(prep.config.report_dir, prep.engine.info.backend, prep.started)
    log = GenerationsLog(
        folder / "generations.jsonl", [d.id for d in prep.dataset.documents], root=prep.config.report_dir
    )
    if looks(prep) > 1:
        return _sequential(prep, progress, timing, log, folder)
    early = EarlyScorer(prep) if overlap and not prep.config.update_goldens else None
    generated, goldens, written, unsaved = _generate(prep, progress, timing, early, log)
    t_after = time.perf_counter()
    try:
        bases = baselines(prep, goldens, generated)
        scored = score_all(prep, bases, generated, early, timing)
    except BaseException:
        log.close()
        _close(prep)
        raise
    generated, scored, followed, scheduled = _follow_up(prep, generated, bases, scored, progress, timing, log)
    decision = analyse(prep, generated, scored, followed, flights=scheduled)
    now = time.perf_counter()
    timing.after_generation_s = now - t_after
    timing.harness_total_s = now - prep.t0
    timing.scoring_overlapped = early is not None
    report = write_report(
        build_report(
            prep,
            generated,
            bases,
            scored,
            decision,
            timing=timing,
            written=written,
            followed=followed,
        ),
        folder,
    )
    if unsaved is not None:  # the run is complete and its report kept; the goldens are not
        raise StorageError(f"{unsaved}; the run's report was kept in {folder}")
    return RunOutcome(report, folder)
