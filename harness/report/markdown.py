"""report.md: verdict, findings, per-cell position tables and sign-off; fits a pull-request
comment."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable

from harness.model.analysis import PositionStats
from harness.model.limits import failing
from harness.model.report import CellResult, Report
from harness.model.vocab import CheckStatus, Condition, Rotation, Verdict
from harness.report.summary import boundary_lines, design_lines, engine_lines, shard_note
from harness.verdict.messages import ranges

# Markdown's inline and block markup characters (CommonMark lets a backslash escape any ASCII
# punctuation): code spans, emphasis, links and images, raw HTML and entities, headings,
# tables, strikethrough.
_MARKUP = re.compile(r"([\\`*_\[\]<>#|~&!])")


def _visible(ch: str) -> str:
    """A character that would break a line or is invisible, as its Python escape."""
    if ch == "\t":
        return " "
    if unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cf"):
        return ascii(ch)[1:-1]  # \n, \x1b, \u2028, \u200b
    return ch


def md(value: object) -> str:
    """Any string from outside (engine path and name, backend, dataset, sign-off, goldens
    paths, messages that embed them), as literal Markdown text: line breaks and other control
    characters shown as their escapes (so nothing starts a new block: no heading, list or
    table row), markup characters backslash-escaped (so nothing renders as code, emphasis, a
    link, HTML or a table cell). The one way report.md takes text it did not write itself."""
    text = "".join(_visible(ch) for ch in str(value))
    return _MARKUP.sub(r"\\\1", text)


def _per_position(report: Report) -> str:
    """The range of prompts per position over the cells under test (sparse runs)."""
    ns = [p.n for c in report.cells if c.batch_size > 1 for p in c.positions]
    if not ns:
        return "?"
    return str(min(ns)) if min(ns) == max(ns) else f"{min(ns)}-{max(ns)}"


def _fields(report: Report) -> str:
    """--request-field as given: KEY=VALUE, VALUE as JSON."""
    fields = report.options.get("request_fields")
    return ", ".join(
        md(f"{k}={json.dumps(v, ensure_ascii=False)}")
        for k, v in (fields.items() if isinstance(fields, dict) else ())
    )


def _header(report: Report) -> list[str]:
    eng, ds, lim, cache, method = (report.engine, report.dataset, report.limits, report.cache, report.method)
    semantics = (eng.details or {}).get("position_semantics")
    lines = [
        f"- Engine: {md(eng.path)} ({md(eng.backend)}, {md(eng.identity)})",
        *([f"- Batch position: {md(semantics)}"] if semantics else []),
        *(
            [
                f"- KV-cache reuse across requests: {md(eng.kv_cache_reuse.setting)} "
                f"({md(eng.kv_cache_reuse.how)})"
            ]
            if eng.kv_cache_reuse
            else []
        ),
        f"- Dataset: {md(ds.name)}, {md(ds.count)} prompts, hash {md(ds.hash[:12])}"
        + (f" (subset of {md(ds.subset.of)}, seed {md(ds.subset.seed)})" if ds.subset else ""),
        f"- Build limits: max_batch_size {md(lim.max_batch_size)}, max_beam_width "
        f"{md(lim.max_beam_width)}, max_input_len {md(lim.max_input_len)}, max_seq_len "
        f"{md(lim.max_seq_len)}"
        if lim
        else "- Build limits: the engine records no build limits, so none were checked.",
        *(
            [f"- Request fields sent with every request: {_fields(report)}"]
            if report.options.get("request_fields")
            else []
        ),
        *[f"- Memory per GPU: {md(m.message)}" for m in report.memory],
        "- Baseline: " + "; ".join(f"beam {w}: {md(n)}" for w, n in report.baseline.items()),
        f"- Generation cache: {md(cache.reason)}, {md(cache.tally())}",
        "- Questions: " + "; ".join(f"{md(q)}: {md(how)}" for q, how in method.questions.items()),
        f"- Method: tolerance {md(method.tolerance)}, alpha {md(method.alpha)}, "
        f"seed {md(method.seed)}, "
        + (
            f"sparse rotation (each prompt at one position per cell: {_per_position(report)} "
            "prompts per position)"
            if method.rotation == Rotation.SPARSE
            else "full rotation"
        ),
    ]
    lines += [f"- {md(line[0].upper() + line[1:])}" for line in design_lines(report)]
    shard, note = report.shard, shard_note(report)
    if note:
        lines.append(f"- {md(note)}")
    elif shard is not None and shard.merged_from:
        lines.append(f"- Merged from {md(shard.count)} shard reports")
    return lines


def _findings(report: Report) -> list[str]:
    lines = []
    for c in report.cells:
        if c.verdict != Verdict.PASS:
            said = c.headline.removeprefix(f"{c.id}: ")  # the bold id already names the cell
            lines.append(
                f"- **{md(c.id)}**: {md(said)}"
                + (f" — {md(c.cause)}" if c.cause else "")
                + (f" (evidence: {md(c.evidence)})" if c.evidence else "")
            )
        lines += [f"- **{md(c.id)}** build limit: {md(ch.message)}" for ch in failing(c.limit_checks)]
        lines += [
            f"- **{md(c.id)}** {md(ch.name)}: {md(ch.message)}"
            for ch in c.limit_checks
            if ch.status == CheckStatus.WARN
        ]
    lines += [f"- {md(line)}" for line in engine_lines(report) + boundary_lines(report)]
    for sc in report.schedules:
        if sc.verdict in (Verdict.FAIL, Verdict.UNTESTED, Verdict.ERROR):
            lines.append(
                f"- **{md(sc.id)}**: {md(sc.message)}" + (f" — {md(sc.separation)}" if sc.separation else "")
            )
    lines = lines or ["No degraded position and no exceeded build limit."]
    if report.engine_wide is not None and not report.engine_wide.failed:
        lines += ["", f"{md(report.engine_wide.message)}."]
    drift = [c.drift for c in report.cells if c.drift]
    if drift:
        lines += [
            "",
            "Outputs that differ from batch size 1 without losing quality (not failing):",
            "",
            *[f"- {md(d)}" for d in drift],
        ]
    return lines


def _table(cells: tuple[CellResult, ...], value: Callable[[PositionStats], str], verdict: bool) -> list[str]:
    """Per cell and position; with ``verdict``, the cell's verdict and the smallest quality
    drop at a position it detects first."""
    width = max((len(c.positions) for c in cells), default=1)
    head = "| cell | " + ("verdict | detects | " if verdict else "")
    lines = [
        head + " | ".join(str(p) for p in range(width)) + " |",
        "|---|" + ("---|---|" if verdict else "") + "---|" * width,
    ]
    for c in cells:
        vals = [value(p) for p in c.positions] + [""] * (width - len(c.positions))
        detects = "–" if c.detectable_drop is None else f"{c.detectable_drop:.2f}"
        lines.append(
            f"| {md(c.id)} | "
            + (f"{md(c.verdict)} | {detects} | " if verdict else "")
            + " | ".join(vals)
            + " |"
        )
    return lines


def _schedules(report: Report) -> list[str]:
    """The scheduled cells: where their requests ran and what they lost (docs/method.md)."""
    if not report.schedules:
        return []
    lines = [
        "",
        "## Schedules: requests sent into a running batch",
        "",
        "Each request against the same prompt at batch size 1 (warm: against its cold run); joined: "
        "the share of requests after the first sent while another was in flight.",
        "",
        "| cell | verdict | requests | joined | peak in flight | freed slot | cached | mean drop | changed | damaged |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in report.schedules:
        if c.verdict == Verdict.NOT_APPLICABLE:
            lines.append(f"| {md(c.id)} | {md(c.verdict)} | {md(c.message)} |  |  |  |  |  |  |  |")
            continue
        joined = "–" if c.overlap is None else f"{c.overlap:.0%}"
        drop = "–" if c.test is None else f"{c.test.drop:.3f}"
        lines.append(
            f"| {md(c.id)} | {md(c.verdict)} | {len(c.requests)} | {joined} | {c.peak or '–'} | "
            f"{c.count(Condition.FREED_SLOT)} | {c.count(Condition.CACHED)} | {drop} | {c.changed} | "
            f"{len(c.damaged)} |"
        )
    replayed = [c.id for c in report.schedules if c.replayed]
    if replayed:
        lines += [
            "",
            f"Replayed from the generation cache, as an earlier run of this engine sent them "
            f"(`--no-cache` sends them again): {md(', '.join(replayed))}",
        ]
    for c in report.schedules:
        if c.damaged:
            lines += ["", f"{md(c.id)} damaged requests: {md(', '.join(c.damaged))}"]
    return lines


def markdown(report: Report) -> str:
    """The whole report.md."""
    lines = [
        f"# Batch-position report: **{md(str(report.verdict).upper())}**",
        "",
        *_header(report),
        "",
        "## Findings",
        "",
        *_findings(report),
        "",
        "## Quality against the reference summaries by batch position (* = degraded)",
        "",
        "detects: the smallest mean quality drop at one position this run sees with 80% "
        "power (docs/method.md).",
        "",
        *_table(
            report.cells,
            lambda p: "–" if p.quality is None else f"{'*' if p.degraded else ''}{p.quality:.2f}",
            True,
        ),
        "",
        "## Agreement with the baseline by batch position (share of outputs that differ from batch size 1)",
        "",
        *_table(
            report.cells, lambda p: f"{'*' if p.degraded else ''}{p.agreement:.2f} ({p.differing:.0%})", False
        ),
    ]
    degraded = [c for c in report.cells if c.degraded_positions]
    if degraded:
        lines += [
            "",
            "Degraded positions (0-indexed): "
            + "; ".join(f"{md(c.id)} {ranges(c.degraded_positions)}" for c in degraded),
        ]
    lines += _schedules(report)
    s = report.signoff
    sha = report.integrity.sha256 if report.integrity else ""
    lines += [
        "",
        "## Sign-off",
        "",
        f"{md(str(s.verdict).upper())} for {md(s.engine)} ({md(s.identity)}) at "
        f"{md(s.at)}, run by {md(s.by) if s.by else '(no --signoff-by given)'}; "
        f"report sha256 {md(sha)}",
    ]
    return "\n".join(lines) + "\n"
