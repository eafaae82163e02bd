"""The report stage's first half: what the stages produced, as one typed, sealed ``Report``.

``reported`` is shared with ``merge``, which rebuilds every cell from the union of its
shards' scores with the same code.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import __version__
from harness.model.analysis import DropTest, EngineWide, FollowUp, Looks, PositionStats
from harness.model.cell import Cell
from harness.model.report import (
    SCHEMA_VERSION,
    CacheStats,
    CellResult,
    Example,
    GoldenFile,
    Method,
    Report,
    ShardInfo,
    ShardScores,
    Signoff,
    Timing,
)
from harness.model.scores import Levels, finite, mean
from harness.model.vocab import Question, Role, Rotation
from harness.report.provenance import engine_files, environment
from harness.report.serialize import seal
from harness.stages.run import Baseline, Generated, Prepared, Scored
from harness.verdict.decide import Decision

EXAMPLES_PER_CELL = 3
PROMPT_CHARS = 600
TEST = (
    "three questions per cell and position (docs/method.md): position dependence (agreement "
    "with the baseline below the other positions of the batch, same prompts), batch-size "
    "quality (ROUGE-L against the references below batch size 1, same prompts; per cell "
    "too), determinism (outputs that differ from batch size 1), changed outputs (more "
    "outputs differ from batch size 1 than at the other positions, where the position also "
    "lost); one-sided paired t-tests of the drop against the tolerance, Holm-corrected over "
    "all tests of the run"
)
PLANS = {
    Rotation.FULL: "cyclic rotation: every prompt at every position once per cell",
    Rotation.SPARSE: "sparse rotation: every prompt at one position per cell",
}


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


def worst_position(c: CellResult) -> int | None:
    """The degraded position that lost most (quality where measured, else agreement): the one
    the examples show."""
    if not c.degraded_positions:
        return None
    by_position = {s.position: s for s in c.positions}
    return min(c.degraded_positions, key=lambda p: by_position[p].shown)


@dataclass(frozen=True)
class _Outputs:
    """What examples are drawn from: the run's outputs, baselines, documents and prompts."""

    prep: Prepared
    generated: Generated
    bases: Mapping[int, Baseline]

    def examples(self, cell: Cell, position: int) -> tuple[Example, ...]:
        """A few prompts at ``position`` whose output differs from the baseline."""
        outputs = self.generated.outputs.get(cell)
        base = self.bases.get(cell.beam_width)
        if outputs is None or base is None:
            return ()
        docs, row = self.prep.dataset.documents, outputs.scored(position)
        picks = [(i, text) for i, text in enumerate(row) if text is not None and text != base.texts[i]]
        return tuple(
            Example(
                position=position,
                id=docs[i].id,
                prompt=self.prep.prompts[i][:PROMPT_CHARS],
                baseline=base.texts[i],
                output=text,
            )
            for i, text in picks[:EXAMPLES_PER_CELL]
        )


def _test(test: DropTest | None) -> DropTest | None:
    if test is None:
        return None
    return dataclasses.replace(
        test,
        drop=round(test.drop, 6),
        p_value=round(test.p_value, 12),
        p_adjusted=_round(test.p_adjusted, 12),
        se=_round(test.se, 9),
    )


def _position(s: PositionStats) -> PositionStats:
    return dataclasses.replace(
        s,
        agreement=round(s.agreement, 6),
        ci_low=_round(s.ci_low),
        ci_high=_round(s.ci_high),
        agreement_drop=round(s.agreement_drop, 6),
        differing=round(s.differing, 6),
        quality=_round(s.quality),
        quality_bs1=_round(s.quality_bs1),
        position_test=_test(s.position_test),
        quality_test=_test(s.quality_test),
        change_test=_test(s.change_test),
        follow_up=_position(s.follow_up) if s.follow_up is not None else None,
    )


def reported_engine(e: EngineWide | None) -> EngineWide | None:
    """The engine-wide test as the report holds it, figures rounded (shared with ``merge``)."""
    test = _test(e.test) if e is not None else None
    return dataclasses.replace(e, test=test) if e is not None and test is not None else None


def reported(c: CellResult, examples: Sequence[Example]) -> CellResult:
    """A cell as the report holds it: figures rounded, with examples of its worst position
    (shared with ``merge``)."""
    return dataclasses.replace(
        c,
        baseline_level=_round(c.baseline_level),
        quality=_round(c.quality),
        quality_bs1=_round(c.quality_bs1),
        differing=_round(c.differing),
        detectable_drop=_round(c.detectable_drop),
        omnibus=_test(c.omnibus),
        positions=tuple(_position(s) for s in c.positions),
        examples=tuple(examples),
    )


def blindness(levels: Mapping[int, Levels], cells: Sequence[CellResult], tolerance: float) -> str | None:
    """Why the quality question can hardly see damage in this run, if it cannot: batch size
    1's outputs score about as well against other documents' references (what an off-topic,
    damaged output scores) as against their own, so the most a damaged output can lose is
    under twice the smallest drop the run detects."""
    worst: tuple[float, str] | None = None
    for w, level in levels.items():
        own, other = finite(level.quality), finite(level.unrelated)
        if not own or not other:
            continue
        room = mean(own) - mean(other)
        seen = [c.detectable_drop for c in cells if c.beam_width == w and c.detectable_drop]
        smallest = max(tolerance, min(seen, default=tolerance))
        if room < 2 * smallest and (worst is None or room < worst[0]):
            worst = (
                room,
                f"nearly blind here: at beam width {w} batch size 1 scores "
                f"{mean(own):.3f} against its own references and {mean(other):.3f} "
                f"against other documents', so a damaged output can lose about "
                f"{max(room, 0.0):.3f}, under twice the smallest drop this run "
                f"detects ({smallest:.3f}); check that the references, the prompt "
                "template and the engine fit this dataset",
            )
    return worst[1] if worst else None


def questions(deterministic: bool, has_references: bool, blind: str | None = None) -> dict[Question, str]:
    """What each question is in this run: a gate, a figure, or not answered (and why)."""
    quality = (
        f"{Role.GATE}" + (f", but {blind}" if blind else "")
        if has_references
        else f"{Role.NOT_ANSWERED}: the dataset has no reference summaries; the gate uses position "
        "dependence"
        + (" and determinism" if deterministic else "")
        + " only, so damage that hits every position alike is not caught"
    )
    return {
        Question.POSITION: f"{Role.GATE}",
        Question.QUALITY: quality,
        Question.DETERMINISM: f"{Role.GATE} (--deterministic)" if deterministic else f"{Role.REPORTED}",
        Question.CHANGES: f"{Role.GATE} where the position also lost",
    }


def _shard_blocks(
    prep: Prepared, scored: Scored, decision: Decision, outputs: _Outputs
) -> tuple[ShardInfo | None, ShardScores | None]:
    """For --shard runs: which cells this shard ran, and what ``merge`` needs to decide the
    union as one run: per-prompt scores (unrounded), batch size 1's levels, the prompt order
    and lengths the fault signatures use, and examples of every position that merge may find
    degraded (its tests' drops beyond the tolerance: the merged Holm correction sees the other
    shards' p-values where this one counted clean tests, so it can flag what this shard did not)."""
    if not prep.config.shard:
        return None, None
    k, n = prep.config.shard
    tolerance = prep.config.tolerance
    by_cell = {c.cell: c for c in decision.cells}
    examples = {
        cell.id: {
            s.position: outputs.examples(cell, s.position)
            for s in by_cell[cell].positions
            if s.degraded_by(lambda t: t.drop > tolerance, tolerance)
        }
        for cell in scored.cells
    }
    info = ShardInfo(
        index=k,
        count=n,
        cells=tuple(c.id for c in decision.cells),
        grid=tuple(c.id for c in prep.grid),
    )
    return info, ShardScores(
        levels=dict(scored.levels),
        cells={cell.id: scores for cell, scores in scored.cells.items()},
        examples=examples,
        order=prep.plan.order,
        prompt_lengths=prep.lengths(),
    )


def rounded(timing: Timing) -> Timing:
    """Timing figures to 0.1 ms, as reported."""
    out = dataclasses.replace(timing)
    for f in dataclasses.fields(out):
        if isinstance(value := getattr(out, f.name), float):
            setattr(out, f.name, round(value, 4))
    return out


def _goldens(bases: Mapping[int, Baseline]) -> dict[int, GoldenFile]:
    out = {}
    for w, base in bases.items():
        if base.goldens_path is not None:
            file = Path(base.goldens_path)
            out[w] = GoldenFile(
                path=base.goldens_path,
                sha256=hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else None,
            )
    return out


def build_report(
    prep: Prepared,
    generated: Generated,
    bases: Mapping[int, Baseline],
    scored: Scored,
    decision: Decision,
    *,
    timing: Timing,
    written: tuple[str, ...] = (),
    followed: FollowUp | None = None,
    sequential: Looks | None = None,
) -> Report:
    """The sealed report of one run, from what its stages produced (``followed``: what the
    sparse screen's follow-up spent)."""
    outputs = _Outputs(prep, generated, bases)
    cells = tuple(
        reported(c, () if (w := worst_position(c)) is None else outputs.examples(c.cell, w))
        for c in decision.cells
    )
    shard, scores = _shard_blocks(prep, scored, decision, outputs)
    config, info, plan = prep.config, prep.engine.info, prep.plan
    verdict = decision.verdict
    finished = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    blind = blindness(scored.levels, decision.cells, config.tolerance)
    report = Report(
        schema_version=SCHEMA_VERSION,
        verdict=verdict,
        started=prep.started.isoformat(timespec="seconds"),
        finished=finished,
        seconds=round(time.perf_counter() - prep.t0, 2),
        harness_version=__version__,
        signoff=Signoff(
            by=config.signoff_by, at=finished, engine=info.path, identity=info.identity, verdict=verdict
        ),
        engine=dataclasses.replace(info, files=engine_files(info.path)),
        limits=prep.limits,
        memory=prep.memory,
        cache=prep.cache.stats if prep.cache else CacheStats(folder=None, enabled=False, reason="off"),
        dataset=prep.dataset.info,
        ranks=prep.ranks,
        baseline={w: b.source for w, b in bases.items()},
        goldens=_goldens(bases),
        goldens_written=written,
        method=Method(
            tolerance=config.tolerance,
            alpha=config.alpha,
            seed=plan.seed,
            sequences=sequential.spent
            if sequential
            else plan.sequences() + (followed.spent if followed else 0),
            test=TEST,
            plan=PLANS[plan.rotation],
            rotation=plan.rotation,
            deterministic=config.deterministic,
            questions=questions(config.deterministic, prep.dataset.has_references, blind),
            blind=blind,
            family=decision.family,
            engine_share=decision.engine_share,
            schedule_share=decision.schedule_share,
            follow_up=followed,
            sequential=sequential,
        ),
        options=config.as_dict(),
        environment=environment(),
        timing=rounded(timing),
        cells=cells,
        boundaries=decision.boundaries,
        engine_wide=reported_engine(decision.engine_wide),
        schedules=decision.scheduled,
        shard=shard,
        scores=scores,
    )
    return seal(report)
