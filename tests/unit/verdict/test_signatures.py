"""Signature matching on synthetic evidence (real generations: tests/integration/test_fault_models.py)."""

from __future__ import annotations

from collections.abc import Collection

from harness.model.analysis import CellAnalysis, DropTest, PositionStats
from harness.model.cell import Cell
from harness.model.limits import EngineLimits
from harness.model.vocab import Layout, Verdict
from harness.plan import make_plan
from harness.verdict.evidence import CellEvidence
from harness.verdict.signatures import match

LIMITS_8x1 = EngineLimits(layout=Layout.UNIFIED, max_batch_size=8, max_beam_width=1)
LIMITS_8x4 = EngineLimits(layout=Layout.UNIFIED, max_batch_size=8, max_beam_width=4)
N = 32


def _flag(drop: float, flagged: bool) -> DropTest:
    return DropTest(
        drop=drop, p_value=1e-9 if flagged else 0.5, n=N, p_adjusted=1e-8 if flagged else 1.0, flagged=flagged
    )


def evidence(
    cell: Cell,
    damaged: Collection[int],
    *,
    share: float = 1.0,
    shorter: tuple[tuple[int, ...], ...] | None = None,
    drop: float = 0.6,
    positional: bool = True,
) -> CellEvidence:
    """A cell whose ``damaged`` positions lose ``drop`` quality on ``share`` of the prompts;
    ``positional``: the damage makes those positions worse than the others (else alike)."""
    hit_until = round(share * N)
    harm = tuple(
        tuple(drop if p in damaged and i < hit_until else 0.0 for i in range(N))
        for p in range(cell.batch_size)
    )
    stats = tuple(
        PositionStats(
            position=p,
            n=N,
            agreement=1 - sum(r) / N,
            ci_low=None,
            ci_high=None,
            agreement_drop=sum(r) / N,
            differing=sum(x > 0 for x in r) / N,
            quality=0.65 - sum(r) / N,
            quality_bs1=0.65,
            position_test=_flag(sum(r) / N, positional and p in damaged),
            quality_test=_flag(sum(r) / N, p in damaged),
            degraded=p in damaged,
        )
        for p, r in enumerate(harm)
    )
    verdict = Verdict.FAIL if damaged else Verdict.PASS
    analysis = CellAnalysis(cell, 1.0, stats, verdict, "")
    return CellEvidence(analysis=analysis, harm=harm, shorter=shorter)


def test_overflow_names_both_beam_widths_and_the_flag() -> None:
    found = match(
        [
            evidence(Cell(8, 4), set(range(2, 8))),
            evidence(Cell(8, 2), set(range(4, 8))),
            evidence(Cell(8, 1), set()),
        ],
        LIMITS_8x1,
    )
    text = found[Cell(8, 4)].text
    assert found[Cell(8, 4)].kind == found[Cell(8, 2)].kind == "overflow"
    assert text.startswith(
        "positions >= 2 degraded at beam width 4 and positions >= 4 degraded "
        "at beam width 2: matches KV beam-slot overflow for max_batch_size 8 x "
        "max_beam_width 1 = 8 slots; rebuild with --max_beam_width 4"
    )


def test_overflow_is_inferred_without_limits_only_from_two_beam_widths_that_agree() -> None:
    both = [
        evidence(Cell(8, 4), set(range(2, 8))),
        evidence(Cell(8, 2), set(range(4, 8))),
        evidence(Cell(4, 2), set()),
    ]
    found = match(both, None)
    assert found[Cell(8, 4)].kind == "overflow" and "8 beam slots (inferred" in found[Cell(8, 4)].text
    assert "beam widths 2, 4" in found[Cell(8, 4)].text and found[Cell(8, 4)].evidence
    # one beam width alone fits many slot counts: no cause named
    assert match([evidence(Cell(8, 4), set(range(2, 8))), evidence(Cell(4, 4), {2, 3})], None) == {}


def test_one_broken_slot_without_limits_is_not_called_overflow() -> None:
    """Batch 2, beam 2, position 1 fits "2 slots" by arithmetic, but nothing else supports it."""
    found = match([evidence(Cell(2, 2), {1}), evidence(Cell(2, 1), set())], None)
    assert found.get(Cell(2, 2)) is None or found[Cell(2, 2)].kind != "overflow"


def test_a_passing_beam_cell_contradicts_an_inferred_slot_count() -> None:
    cells = [
        evidence(Cell(8, 4), set(range(2, 8))),
        evidence(Cell(8, 2), set(range(4, 8))),
        evidence(Cell(4, 4), set()),
    ]  # 8 slots would break bs4-beam4 positions 2-3
    assert all(f.kind != "overflow" for f in match(cells, None).values())


def test_full_batch_needs_a_smaller_batch_that_passes() -> None:
    cells = [evidence(Cell(8, 1), {7}), evidence(Cell(4, 1), set())]
    assert match(cells, LIMITS_8x4)[Cell(8, 1)].kind == "full-batch"
    assert match([evidence(Cell(8, 1), {7})], LIMITS_8x4)[Cell(8, 1)].kind == "single"


def test_padding_is_told_apart_from_position_damage() -> None:
    plan = make_plan((4,), (1,), N, seed=0)
    lengths = [50 + (7 * i) % 40 for i in range(N)]
    short = plan.shortfall(Cell(4, 1), lengths)
    harm = tuple(tuple(0.8 if short[p][i] > 0 else 0.0 for i in range(N)) for p in range(4))
    e = evidence(Cell(4, 1), {0, 1, 2, 3}, shorter=short, positional=False)
    e = CellEvidence(analysis=e.analysis, harm=harm, shorter=short)
    assert match([e], LIMITS_8x4)[Cell(4, 1)].kind == "padding"
    # the same positions, damage independent of length and alike everywhere: a batch > 1 path
    flat = evidence(Cell(4, 1), {0, 1, 2, 3}, shorter=short, positional=False)
    found = match([flat], LIMITS_8x4)[Cell(4, 1)]
    assert found.kind == "all-positions" and "no position worse than the others" in found.text
    # every position degraded but some worse than others: no uniform batch > 1 path
    assert match([evidence(Cell(4, 1), {0, 1, 2, 3}, shorter=short)], LIMITS_8x4) == {}


def test_stride_is_beam_only_with_position_0_intact() -> None:
    beam = evidence(Cell(4, 2), {1, 2, 3}, share=0.7)
    found = match([beam, evidence(Cell(4, 1), set())], LIMITS_8x4)[Cell(4, 2)]
    assert found.kind == "stride" and "greedy passes" in found.evidence
    greedy_broken = evidence(Cell(4, 1), {1, 2, 3})
    assert Cell(4, 2) not in match([beam, greedy_broken], LIMITS_8x4)  # no guess


def test_two_swapped_outputs_are_not_called_stride() -> None:
    """Positions 1 and 2 of a batch of 8 exchanged their outputs: not every later position."""
    found = match([evidence(Cell(8, 2), {1, 2}), evidence(Cell(8, 1), set())], LIMITS_8x4)
    assert all(f.kind != "stride" for f in found.values())


def test_partial_reports_the_share_of_prompts() -> None:
    found = match([evidence(Cell(8, 1), {3}, share=0.3)], LIMITS_8x4)[Cell(8, 1)]
    assert found.kind == "partial" and "position 3 degraded, on about 31% of prompts" in found.text


def _changed(cell: Cell, rows: dict[int, float], background: float = 0.0) -> tuple[tuple[float, ...], ...]:
    """Per position, 1.0 for the first share of prompts whose output differs from batch size 1."""
    return tuple(
        tuple(1.0 if i < round(rows.get(p, background) * N) else 0.0 for i in range(N))
        for p in range(cell.batch_size)
    )


def test_the_share_hit_comes_from_the_outputs_that_changed_not_a_quality_cut() -> None:
    """Every position-0 output cut by a quarter: a small harm on each (most below the HIT cut)
    but all of them changed: one slot, every prompt (was 'partial, on 6% of prompts')."""
    e = evidence(Cell(2, 1), {0}, share=0.06)
    whole = CellEvidence(analysis=e.analysis, harm=e.harm, changed=_changed(Cell(2, 1), {0: 1.0}))
    found = match([whole], LIMITS_8x4)[Cell(2, 1)]
    assert found.kind == "single" and "on 100% of prompts" in found.text
    assert "100% of outputs at position 0 differ from batch size 1" in found.evidence
    # a third of the prompts changed there, on an engine where 30% change everywhere (drift)
    e = evidence(Cell(8, 1), {5}, share=0.3)
    drifting = CellEvidence(
        analysis=e.analysis, harm=e.harm, changed=_changed(Cell(8, 1), {5: 0.53}, background=0.3)
    )
    found = match([drifting], LIMITS_8x4)[Cell(8, 1)]
    assert found.kind == "partial" and "on about 32% of prompts" in found.text  # (53% - 31%) / 69%


def test_an_engine_wide_cause_is_named_only_where_every_failing_cell_shows_it() -> None:
    """Outputs cut at every batch size > 1: padding fitted 2 of 9 cells by chance and
    all-positions the other 7; padding is then named nowhere, and the cell it left, matched
    again without it, is all-positions like the others."""
    plan = make_plan((4,), (1,), N, seed=0)
    lengths = [50 + (7 * i) % 40 for i in range(N)]
    short = plan.shortfall(Cell(4, 1), lengths)
    by_length = evidence(Cell(4, 1), {0, 1, 2, 3}, shorter=short, positional=False)
    by_length = CellEvidence(
        analysis=by_length.analysis,
        shorter=short,
        harm=tuple(tuple(0.8 if short[p][i] > 0 else 0.0 for i in range(N)) for p in range(4)),
    )
    assert match([by_length], LIMITS_8x4)[Cell(4, 1)].kind == "padding"  # alone, it fits
    flat = [evidence(Cell(8, w), set(range(8)), positional=False) for w in (1, 2)]
    found = match([by_length, *flat], LIMITS_8x4)
    assert {c: f.kind for c, f in found.items()} == {
        Cell(4, 1): "all-positions",
        Cell(8, 1): "all-positions",
        Cell(8, 2): "all-positions",
    }


def test_spread_and_no_guess() -> None:
    e = evidence(Cell(8, 1), set())
    spread = CellEvidence(
        analysis=CellAnalysis(
            Cell(8, 1), 1.0, e.analysis.positions, Verdict.FAIL, "", omnibus=_flag(0.04, True)
        ),
        harm=e.harm,
    )
    assert spread.analysis.spread
    assert match([spread], LIMITS_8x4)[Cell(8, 1)].kind == "spread"
    # two scattered positions, nothing known: the failure stands without a guessed cause
    assert match([evidence(Cell(8, 1), {2, 5}, share=0.5)], LIMITS_8x4) == {}


LIMITS_16x2 = EngineLimits(layout=Layout.UNIFIED, max_batch_size=16, max_beam_width=2)


def _buffer_sweep(
    missed: tuple[int, int] | None = None, extra: tuple[int, int] | None = None
) -> list[CellEvidence]:
    """A beam-2 sweep of a buffer of 16 slots: sizes 9-16 damaged from position 8; ``missed``:
    (size, position) not found; ``extra``: (size, position) degraded below the threshold."""
    cells = []
    for b in range(2, 17):
        damaged = set(range(8, b))
        if missed and missed[0] == b:
            damaged.discard(missed[1])
        if extra and extra[0] == b:
            damaged.add(extra[1])
        cells.append(evidence(Cell(b, 2), damaged))
    return cells


def test_a_beam_buffer_is_named_when_a_sparse_sweep_misses_one_of_its_positions() -> None:
    """Five prompts per position at batch 15 can leave a damaged position short of
    significance: every degraded position still lies beyond 16 slots and every size beyond
    fails, so the cause is named (it used to fall back to 'single' at batch 9)."""
    found = match(_buffer_sweep(), LIMITS_16x2)
    assert {f.kind for f in found.values()} == {"beam-buffer"} and len(found) == 8
    missed = match(_buffer_sweep(missed=(15, 13)), LIMITS_16x2)
    assert {f.kind for f in missed.values()} == {"beam-buffer"} and len(missed) == 8
    assert "35 of their 36 positions degraded" in missed[Cell(9, 2)].evidence


def test_a_beam_buffer_is_not_named_for_damage_before_its_threshold() -> None:
    """One degraded position below the 16 slots, or a size beyond them that passes: not it."""
    for cells in (_buffer_sweep(extra=(12, 3)), _buffer_sweep(missed=(9, 8))):
        assert "beam-buffer" not in {f.kind for f in match(cells, LIMITS_16x2).values()}


def test_a_cell_stopped_early_names_what_its_part_of_the_rotation_shows() -> None:
    """A sequential run's cell holds part of its rotation. Stride reads as on a whole one;
    damage alike at every position is named uniform only where the longest prompt of each
    batch, which padding leaves as it is, changed as often as the others; where it did not,
    the part may be too small for the padding test, and no cause is named."""
    beam = evidence(Cell(4, 2), {1, 2, 3}, share=0.7)
    early = CellEvidence(analysis=beam.analysis, harm=beam.harm, partial=True)
    assert match([early, evidence(Cell(4, 1), set())], LIMITS_8x4)[Cell(4, 2)].kind == "stride"
    plan = make_plan((4,), (1,), N, seed=0)
    short = plan.shortfall(Cell(4, 1), [50 + (7 * i) % 40 for i in range(N)])
    flat = evidence(Cell(4, 1), {0, 1, 2, 3}, shorter=short, positional=False)

    def stopped(changed_longest: float) -> CellEvidence:
        changed = tuple(tuple(1.0 if s > 0 else changed_longest for s in row) for row in short)
        return CellEvidence(
            analysis=flat.analysis, harm=flat.harm, shorter=short, changed=changed, partial=True
        )

    assert match([stopped(1.0)], LIMITS_8x4)[Cell(4, 1)].kind == "all-positions"
    assert match([stopped(0.0)], LIMITS_8x4) == {}
    # without the changed-output record nothing tells them apart
    bare = CellEvidence(analysis=flat.analysis, harm=flat.harm, shorter=short, partial=True)
    assert match([bare], LIMITS_8x4) == {}


def test_damage_on_part_of_the_prompts_of_the_full_batch_is_partial_not_full_batch() -> None:
    """Position 5 hit on half of the prompts: only the full batch (8) has a position 5, so only
    it fails, but a full-batch path damages every request there; this is a slot that corrupts
    some of them (it was named full-batch)."""
    cells = [evidence(Cell(8, 1), {5}, share=0.5), evidence(Cell(4, 1), set())]
    found = match(cells, LIMITS_8x4)[Cell(8, 1)]
    assert found.kind == "partial" and "on about 50% of prompts" in found.text
    whole = [evidence(Cell(8, 1), {5}), evidence(Cell(4, 1), set())]
    assert match(whole, LIMITS_8x4)[Cell(8, 1)].kind == "full-batch"
