"""Does a report's every verdict follow from its own statistics and method?

report.json records the figures each test was computed from (mean drop, p-value, n), the
method (tolerance, alpha) and what was decided from them (adjusted p, flags, degraded
positions, cell and run verdicts). ``audit`` decides again from the figures, exactly as the
analysis does (``harness.verdict.analysis``, ``harness.stages.analyse.cell_result``,
``run_verdict``), and lists every recorded decision that does not follow: a verdict edited
after the run, even with the sha256 recomputed, is found here. Recorded figures that two
fields hold twice are held to each other too (a position's quality test against its quality
and batch size 1's; its position test against the agreements of the positions and
its change test against their differing outputs; a cell's
figures against its positions').

What it cannot find: figures rewritten consistently (drops, p-values, means, all together);
no check of a file's content can, and only a keyed signature (``integrity.hmac``) shows who
wrote them (docs/reliability.md). Allowances are the report's own rounding: drops and means
to 6 decimals, p-values to 12.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from harness.model.analysis import DropTest, EngineWide, PositionStats, cell_fails
from harness.model.limits import failing
from harness.model.report import CellResult, Report, cell_verdict, run_verdict
from harness.model.scores import mean
from harness.model.vocab import Rotation, Verdict
from harness.verdict.analysis import pools
from harness.verdict.follow_up import CONFIRM_SHARE, screen_alpha
from harness.verdict.schedules import decided_again, share_of
from harness.verdict.sequential import final_alpha
from harness.verdict.statistics import ENGINE_SHARE, family_weights, holm, joint_holm

FIGURE = 1e-5  # two figures rounded to 6 decimals, and their difference
P_ROUNDING = 1e-12  # p-values are kept to 12 decimals
ENGINE_TEST = "engine-wide test"


@dataclass(frozen=True)
class _Test:
    where: str
    test: DropTest


def _tests(report: Report) -> Iterator[_Test]:
    """Every test of the run: one Holm family (harness.verdict.analysis)."""
    for cell in report.cells:
        for s in cell.positions:
            for name, test in (
                ("position test", s.position_test),
                ("quality test", s.quality_test),
                ("change test", s.change_test),
            ):
                if test is not None:
                    yield _Test(f"{cell.id} position {s.position} {name}", test)
        if cell.omnibus is not None:
            yield _Test(f"{cell.id} omnibus test", cell.omnibus)
    if report.engine_wide is not None:
        yield _Test(ENGINE_TEST, report.engine_wide.test)


def _near(a: float | None, b: float | None, allowance: float = FIGURE) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= allowance


def _follow_ups(report: Report) -> Iterator[_Test]:
    """The follow-up's tests: a Holm family of their own (harness.verdict.follow_up)."""
    for cell in report.cells:
        for s in cell.positions:
            f = s.follow_up
            if f is None:
                continue
            for name, test in (
                ("position test", f.position_test),
                ("quality test", f.quality_test),
                ("change test", f.change_test),
            ):
                if test is not None:
                    yield _Test(f"{cell.id} position {s.position} follow-up {name}", test)


def _scheduled_p(report: Report) -> list[float]:
    """The recorded p-values the scheduled cells add to the run's family (those that ran as
    planned: ``harness.verdict.schedules.Examined.tests``)."""
    tested = [c for c in report.schedules if c.verdict in (Verdict.PASS, Verdict.FAIL)]
    return [t.p_value for c in tested for t in (c.test, *[g.test for g in c.groups]) if t is not None]


def _schedule_share(report: Report, out: list[str]) -> float:
    """The share of alpha the method gives the scheduled cells' tests; a recorded one that
    does not follow from them is listed."""
    share, wrong = share_of(report.schedules, report.method.schedule_share)
    if wrong is not None:
        out.append(wrong)
    return share


def _screen(report: Report) -> float:
    """The alpha the run's main family is decided at."""
    return screen_alpha(final_alpha(report.method), report.method.follow_up is not None)


def _flags(report: Report, out: list[str]) -> tuple[dict[int, bool], list[float], list[float]]:
    """Each test's flag as the method decides it from the recorded drop and p-value (by
    ``id`` of the test); a recorded adjusted p or flag that differs is listed. Also the bulk
    tests' p-values and weights in the family (clean ones included), which the scheduled
    cells' tests are corrected with."""
    tests = list(_tests(report))
    # the tests the run's design makes but these cells do not (another shard's, an engine
    # error) count as clean, as the analysis counts them
    clean = max(0, (report.method.family or len(tests)) - len(tests))
    engine = next((i for i, t in enumerate(tests) if t.where == ENGINE_TEST), None)
    share = report.method.engine_share
    if share is not None and share != ENGINE_SHARE:
        out.append(f"method.engine_share {share}, but the method weighs the engine-wide test {ENGINE_SHARE}")
    follow = report.method.follow_up
    if follow is not None and follow.confirm_share != CONFIRM_SHARE:
        out.append(
            f"method.follow_up.confirm_share {follow.confirm_share}, but the method gives the follow-up "
            f"{CONFIRM_SHARE} of alpha"
        )
    again = list(_follow_ups(report))
    if again and follow is None:
        out.append("positions carry follow-up tests, but the method records no follow-up")
    p_values = [t.test.p_value for t in tests] + [1.0] * clean
    weights = family_weights(len(tests), len(p_values), engine, share is not None)
    adjusted, _ = joint_holm(p_values, weights, _scheduled_p(report), _schedule_share(report, out))
    decided = _decided(tests, adjusted, _screen(report), report.method.tolerance, out)
    alpha = report.method.alpha * CONFIRM_SHARE
    followed = _decided(again, holm([t.test.p_value for t in again]), alpha, report.method.tolerance, out)
    return decided | followed, p_values, weights


def _decided(
    tests: Sequence[_Test], adjusted: Sequence[float], alpha: float, tol: float, out: list[str]
) -> dict[int, bool]:
    """The flags of one family's tests from their Holm-adjusted p-values; a recorded adjusted p
    or flag that differs is listed."""
    slack = (len(tests) + 1) * P_ROUNDING
    decided: dict[int, bool] = {}
    for t, adj in zip(tests, adjusted):
        recorded = t.test.p_adjusted
        if recorded is None or not _near(recorded, adj, slack):
            out.append(
                f"{t.where}: adjusted p {recorded} is not (weighted) Holm's over its family's "
                f"{len(adjusted)} tests ({adj:.3g})"
            )
        flag = t.test.drop > tol and adj < alpha
        at_edge = abs(t.test.drop - tol) <= FIGURE or abs(adj - alpha) <= slack
        if t.test.flagged != flag and not at_edge:
            out.append(
                f"{t.where}: flagged {str(t.test.flagged).lower()}, but its drop "
                f"{t.test.drop} against tolerance {tol} and adjusted p {adj:.3g} against "
                f"alpha {alpha} say {str(flag).lower()}"
            )
        decided[id(t.test)] = t.test.flagged if at_edge else flag
    return decided


def _weighted(positions: Sequence[PositionStats], name: str) -> float:
    """The positions' mean of a figure, weighted by their prompts."""
    n = sum(s.n for s in positions)
    return math.fsum(getattr(s, name) * s.n for s in positions) / n if n else math.nan


def _stopped_early(report: Report, cell: CellResult) -> bool:
    """Whether a sequential run stopped the cell before its last look: it holds part of its
    rotation (a prompt sat at some positions only), so its paired drops are not differences of
    the positions' means."""
    looked = report.method.sequential
    return looked is not None and looked.decided.get(cell.id, looked.looks) < looked.looks


def _position(
    report: Report, cell: CellResult, s: PositionStats, flags: dict[int, bool], out: list[str]
) -> bool:
    """One position's recorded decisions and twice-held figures; returns whether it is
    degraded as its tests decide."""
    where = f"{cell.id} position {s.position}"

    def flag(t: DropTest) -> bool:
        return flags.get(id(t), False)

    tol = report.method.tolerance
    degraded = s.degraded_by(flag, tol) or (s.follow_up is not None and s.follow_up.degraded_by(flag, tol))
    if s.degraded != degraded:
        out.append(f"{where}: degraded {str(s.degraded).lower()}, but its tests say {str(degraded).lower()}")
    nondeterministic = report.method.deterministic and s.differing > 0
    if s.nondeterministic != nondeterministic:
        out.append(
            f"{where}: nondeterministic {str(s.nondeterministic).lower()}, but "
            f"--deterministic {str(report.method.deterministic).lower()} and "
            f"{s.differing:.0%} differing outputs say {str(nondeterministic).lower()}"
        )
    q = s.quality_test
    if (
        q is not None
        and s.quality is not None
        and s.quality_bs1 is not None
        and not _near(q.drop, s.quality_bs1 - s.quality)
    ):
        out.append(
            f"{where}: quality test drop {q.drop}, but its quality {s.quality} and batch "
            f"size 1's {s.quality_bs1} differ by {s.quality_bs1 - s.quality:.6f}"
        )
    others = [o for o in cell.positions if o.position != s.position]
    p = s.position_test
    whole = not _stopped_early(report, cell)
    if p is not None and others and whole and not _near(p.drop, _weighted(others, "agreement") - s.agreement):
        out.append(
            f"{where}: position test drop {p.drop}, but its agreement {s.agreement} is "
            f"{_weighted(others, 'agreement') - s.agreement:.6f} below the other positions'"
        )
    c = s.change_test
    if c is not None and others and whole and not _near(c.drop, s.differing - _weighted(others, "differing")):
        out.append(
            f"{where}: change test share {c.drop}, but its differing outputs "
            f"{s.differing} are {s.differing - _weighted(others, 'differing'):.6f} above "
            "the other positions'"
        )
    return degraded


def _cell(report: Report, cell: CellResult, flags: dict[int, bool], out: list[str]) -> Verdict:
    """One cell's recorded decisions; returns its verdict as its figures decide it."""
    degraded = tuple(s.position for s in cell.positions if _position(report, cell, s, flags, out))
    if tuple(cell.degraded_positions) != degraded:
        out.append(
            f"{cell.id}: degraded positions {list(cell.degraded_positions)}, but its "
            f"positions' tests say {list(degraded)}"
        )
    nondet = (
        tuple(s.position for s in cell.positions if report.method.deterministic and s.differing > 0)
        if cell.batch_size > 1
        else ()
    )
    if tuple(cell.nondeterministic_positions) != nondet:
        out.append(
            f"{cell.id}: nondeterministic positions {list(cell.nondeterministic_positions)}"
            f", but its positions say {list(nondet)}"
        )
    empty = tuple(s.position for s in cell.positions if s.empty > 0)
    omnibus = cell.omnibus is not None and flags.get(id(cell.omnibus), False)
    _cell_figures(report, cell, out)
    failed = cell_fails(bool(degraded), omnibus, bool(nondet), bool(empty))
    verdict = cell_verdict(error=cell.error is not None, failed=failed, notice=bool(cell.notice))
    why = (
        "an engine error"
        if cell.error is not None
        else f"degraded positions {list(degraded)}"
        if degraded
        else "its omnibus test"
        if omnibus
        else f"outputs with no text at positions {list(empty)}"
        if empty
        else f"differing outputs at positions {list(nondet)} under --deterministic"
        if nondet
        else "its notice"
        if cell.notice
        else "no failing test"
    )
    if cell.verdict != verdict:
        out.append(f"{cell.id}: verdict {cell.verdict}, but its figures make it {verdict} ({why})")
    limits = Verdict.FAIL if failing(cell.limit_checks) else Verdict.PASS
    if cell.limits_verdict != limits:
        out.append(f"{cell.id}: limits verdict {cell.limits_verdict}, but its limit checks say {limits}")
    return verdict


def _cell_figures(report: Report, cell: CellResult, out: list[str]) -> None:
    """A cell's means against its positions' (and, in a full rotation, its omnibus drop)."""
    rows = cell.positions
    if not rows:
        return
    for name, values in (
        ("quality", [s.quality for s in rows]),
        ("quality_bs1", [s.quality_bs1 for s in rows]),
        ("differing", [s.differing for s in rows]),
    ):
        seen = [v for v in values if v is not None]
        expected = mean(seen) if seen else None
        recorded = getattr(cell, name)
        if name == "differing" and recorded is None:
            continue
        if not _near(recorded, expected):
            out.append(f"{cell.id}: {name} {recorded}, but its positions' mean is {expected}")
    o = cell.omnibus
    if (
        o is not None
        and report.method.rotation == Rotation.FULL
        and not _stopped_early(report, cell)
        and cell.quality is not None
        and cell.quality_bs1 is not None
        and not _near(o.drop, cell.quality_bs1 - cell.quality)
    ):
        out.append(
            f"{cell.id}: omnibus drop {o.drop}, but its quality {cell.quality} and batch "
            f"size 1's {cell.quality_bs1} differ by {cell.quality_bs1 - cell.quality:.6f}"
        )


def _method(report: Report, out: list[str]) -> None:
    """The method block against the options the run was given."""
    m, given = report.method, report.options
    for name, value in (
        ("tolerance", m.tolerance),
        ("alpha", m.alpha),
        ("deterministic", m.deterministic),
        ("rotation", str(m.rotation)),
    ):
        if name in given and given[name] != value:
            out.append(f"method.{name} {value}, but the run was given {name} {given[name]}")


def _engine_wide(report: Report, flags: dict[int, bool], out: list[str]) -> EngineWide | None:
    """The engine-wide test with its flag as its figures decide it; a report whose batched
    cells with references make one but records none, or that pools other cells, is listed."""
    e = report.engine_wide
    scored = [c for c in report.cells if c.positions]
    batched = sorted(c.id for c in scored if c.batch_size > 1)
    references = any(s.quality is not None for c in scored for s in c.positions)
    if e is None:  # reports from before the test was made record no share and no test
        if report.method.engine_share is not None and references and pools([c.cell for c in scored]):
            out.append(f"engine_wide: missing, but the cells {', '.join(batched)} with references make one")
        return None
    if sorted(e.cells) != batched:
        out.append(
            f"engine_wide: pools {', '.join(e.cells)}, not the report's batched cells {', '.join(batched)}"
        )
    return replace(e, test=replace(e.test, flagged=flags.get(id(e.test), e.test.flagged)))


def audit(report: Report) -> list[str]:
    """Every recorded decision of the report that does not follow from its own figures and
    method (empty: every verdict follows)."""
    out: list[str] = []
    _method(report, out)
    flags, bulk, weights = _flags(report, out)
    decided = [_cell(report, cell, flags, out) for cell in report.cells]
    engine = _engine_wide(report, flags, out)
    expected = run_verdict(
        [replace(c, verdict=v) for c, v in zip(report.cells, decided)], engine, report.schedules
    )
    if report.cells and report.verdict != expected:
        out.append(
            f"verdict {report.verdict}, but its cells, the engine-wide test and the scheduled cells make it {expected}"
        )
    m = report.method
    out += decided_again(
        report.schedules,
        m.tolerance,
        _screen(report),
        m.deterministic,
        bulk=bulk,
        weights=weights,
        share=share_of(report.schedules, m.schedule_share)[0],
    )
    if report.signoff.verdict != report.verdict:
        out.append(f"signoff.verdict {report.signoff.verdict}, but the report's verdict is {report.verdict}")
    return out
