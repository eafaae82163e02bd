"""The lines a terminal shows for a report: the same for ``python -m harness run``, the pytest
plugin's summary and ``merge`` (as syrupy's report yields its terminal lines)."""

from __future__ import annotations

from harness.model.analysis import shown_p
from harness.model.limits import failing
from harness.model.report import Report
from harness.model.vocab import CacheReuse, Verdict


def cell_lines(report: Report) -> list[str]:
    """Per cell: the verdict, quality by position (agreement without references; * =
    degraded) and the share of outputs that differ from batch size 1."""
    lines = []
    for c in report.cells:
        if c.error:
            lines.append(f"{c.id:>12}  ERROR  {c.error}")
            continue
        marks = " ".join(f"{'*' if p.degraded else ' '}{p.shown:.2f}" for p in c.positions)
        differ = f"   differ {c.differing:.0%}" if c.differing else ""
        sees = f"   detects >= {c.detectable_drop:.2f}" if c.detectable_drop is not None else ""
        lines.append(f"{c.id:>12}  {str(c.verdict).upper():5}  {marks}{differ}{sees}")
    e = report.engine_wide
    if e is not None:  # the batch-size quality question over every batched output
        left_open = report.method.sequential is not None and report.method.sequential.engine_open
        verdict = Verdict.FAIL if e.failed else (Verdict.UNTESTED if left_open else Verdict.PASS)
        lines.append(
            f"{'engine-wide':>12}  {str(verdict).upper():5} mean drop {e.test.drop:.3f} below batch size 1 "
            f"over {len(e.cells)} batched cells (adjusted p {shown_p(e.test.p_adjusted)})"
        )
    return lines


def schedule_lines(report: Report) -> list[str]:
    """Per scheduled cell its verdict and one line; the cells the engine cannot run, one line
    per reason."""
    lines = [
        f"{c.id:>22}  {str(c.verdict).upper():5}  {c.message}"
        for c in report.schedules
        if c.verdict != Verdict.NOT_APPLICABLE
    ]
    reasons: dict[str, list[str]] = {}
    for c in report.schedules:
        if c.verdict == Verdict.NOT_APPLICABLE:
            reasons.setdefault(c.message, []).append(c.id)
    lines += [f"{'not applicable':>22}  {', '.join(ids)}: {why}" for why, ids in reasons.items()]
    return lines


def legend(report: Report) -> str:
    """What the numbers of ``cell_lines`` are."""
    refs = any(p.quality is not None for c in report.cells for p in c.positions)
    what = "quality vs references" if refs else "agreement with the baseline (no references)"
    return (
        f"{what} by batch position (* = degraded); differ = outputs unlike batch size 1's; "
        "detects = the smallest quality drop at a position this run sees (80% power):"
    )


def finding_lines(report: Report) -> list[str]:
    """Every exceeded build limit and every failing cell with its likely cause."""
    lines = []
    for c in report.cells:
        lines += [f"{c.id}: build limit: {ch.message}" for ch in failing(c.limit_checks)]
        if c.verdict in (Verdict.FAIL, Verdict.UNTESTED):
            lines.append(c.headline)
            if c.cause:
                lines.append(f"  {c.cause}")
    for sc in report.schedules:
        if sc.verdict in (Verdict.FAIL, Verdict.UNTESTED, Verdict.ERROR):
            lines.append(f"{sc.id}: {sc.verdict}: {sc.message}")
            if sc.separation:
                lines.append(f"  {sc.separation}")
    return lines + engine_lines(report) + boundary_lines(report) + drift_lines(report)


def engine_lines(report: Report) -> list[str]:
    """The engine-wide test's line where it failed (report.json ``engine_wide``)."""
    e = report.engine_wide
    return [e.message] if e is not None and e.failed else []


def boundary_lines(report: Report) -> list[str]:
    """Per beam width whose cells fail somewhere among two or more batch sizes: from which
    batch size (report.json ``boundaries``)."""
    return [b.message for b in report.boundaries if b.first_failing is not None and len(b.tested) > 1]


def drift_lines(report: Report) -> list[str]:
    """Cells whose outputs differ from batch size 1 without failing: said, not failed."""
    return [f"note: {c.drift}" for c in report.cells if c.drift and c.verdict == Verdict.PASS]


def follow_up_line(report: Report) -> str | None:
    """What the sparse screen's follow-up spent, and where (None: the design has none)."""
    f = report.method.follow_up
    if f is None:
        return None
    screen = report.method.sequences - f.spent
    where = ", ".join(f"{cid} ({n} round{'s' if n != 1 else ''})" for cid, n in f.rounds.items())
    said = (
        f"looked again at {where}: {f.spent:,} more sequences, {f.spent / max(screen, 1):.0%} of the "
        f"screen's {screen:,} (budget {f.budget:,}, --follow-up {f.share:g}); their tests over the new "
        f"prompts alone, at {f.confirm_share:g} of alpha"
        if f.rounds
        else f"the screen saw nothing to look at again; 0 of {f.budget:,} sequences spent"
    )
    left = f"; suspicious but over the budget: {', '.join(f.left)} (raise --follow-up)" if f.left else ""
    return f"follow-up of the sparse screen: {said}{left}"


def sequential_line(report: Report) -> str | None:
    """What the sequential design spent and where each cell stopped (None: the fixed design)."""
    q = report.method.sequential
    if q is None:
        return None
    by_look: dict[int, list[str]] = {}
    for cid, look in q.decided.items():
        by_look.setdefault(look, []).append(cid)
    where = "; ".join(
        f"{'ran to the last look' if k == q.looks else f'settled at look {k}'}: {', '.join(ids)}"
        for k, ids in sorted(by_look.items())
    )
    return (
        f"sequential design ({q.looks} looks): {q.spent:,} of the fixed design's {q.fixed:,} sequences "
        f"({q.spent / max(q.fixed, 1):.0%}, {q.fixed - q.spent:,} saved); {where}"
    )


def design_lines(report: Report) -> list[str]:
    """What the run's adaptive design spent: the sparse screen's follow-up, the sequential
    design's looks (none for a fixed design)."""
    return [line for line in (follow_up_line(report), sequential_line(report)) if line]


def header_lines(report: Report) -> list[str]:
    """Engine, dataset, baselines, and a warning when the quality question is nearly blind."""
    ds = report.dataset
    return [
        f"engine {report.engine.path} ({report.engine.backend}); dataset {ds.name}, "
        f"{ds.count} prompts, hash {ds.hash[:12]}",
        *[f"baseline beam {w}: {name}" for w, name in report.baseline.items()],
        *(
            [f"KV-cache reuse across requests: {reuse.setting} ({reuse.how})"]
            if (reuse := report.engine.kv_cache_reuse) is not None and reuse.setting != CacheReuse.OFF
            else []
        ),
        *design_lines(report),
        *(
            [f"warning: the batch-size quality question is {report.method.blind}"]
            if report.method.blind
            else []
        ),
    ]


def shard_note(report: Report) -> str | None:
    """What a shard's report says of its verdict: provisional (None: not a shard's report)."""
    shard = report.shard
    if shard is None or not shard.index:
        return None
    return (
        f"shard {shard.index}/{shard.count} (cells {', '.join(shard.cells or ())}): this shard's verdict only, "
        "the other shards' tests counted clean; combine all "
        f"{shard.count} reports with `python -m harness merge REPORT_DIR...` for the run's"
    )


def closing_lines(report: Report, folder: object) -> list[str]:
    """The shard note (a shard's verdict is provisional) and the verdict with the report."""
    note = shard_note(report)
    lines = [note] if note else []
    lines.append(f"verdict: {report.verdict}   report: {folder}/report.html (also report.md, report.json)")
    return lines


def footer_lines(report: Report, folder: object) -> list[str]:
    """Cache and goldens written, then ``closing_lines``."""
    cache = report.cache
    return [
        f"generation cache {cache.reason}: {cache.tally()}",
        *[f"goldens written: {path}" for path in report.goldens_written],
        *closing_lines(report, folder),
    ]
