"""The sequential design's rules: the looks spend alpha and nothing more, the stages cover every
batch once, a cell whose answer is known stops (identical outputs, gross damage), and a position
whose true drop is what the fixed design detects is almost never stopped as clean."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from harness.model.analysis import DropTest
from harness.model.cell import Cell
from harness.plan import Plan
from harness.verdict.decide import Decision, decide
from harness.verdict.sequential import BETA, clean, look_alpha, look_beta, running, stage
from harness.verdict.statistics import min_detectable_drop, per_test_share
from tests.unit.verdict.score_tables import N, levels_of, scored

CELL = Cell(8, 1)
DESIGN = (Cell(1, 1), CELL)


@pytest.mark.parametrize("looks", [1, 2, 4, 7])
def test_the_looks_spend_alpha_and_the_stages_cover_every_batch_once(looks: int) -> None:
    assert math.isclose(sum(look_alpha(0.01, k, looks) for k in range(1, looks + 1)), 0.01)
    for count in (7, 64, 65):
        covered = [i for k in range(1, looks + 1) for i in stage(CELL, count, k, looks)]
        assert sorted(covered) == list(range(count)) and len(covered) == count
        # in ring order from the cell's own start: each stage goes on where the last one ended
        assert all((b - a) % count == 1 for a, b in zip(covered, covered[1:]))


def test_cells_sharing_a_position_see_other_prompts_at_the_first_look() -> None:
    """Damage on a fifth of the prompts at position 3 hid from every cell when all of them
    started their stages at the same batch: position 3 saw the same 16 prompts in each, and
    when none of those was hit every cell stopped as clean after the first look (a run passed
    that the fixed design fails). From starts of their own, the six cells with a position 3
    look at most of the prompts between them."""
    plan = Plan(cells=(), reference_cells=(), order=tuple(range(N)), seed=0)
    cells = [Cell(b, w) for b in (4, 8) for w in (1, 2, 4)]
    seen: set[int] = set()
    for cell in cells:
        every = plan.batches(cell)
        first = [every[i] for i in stage(cell, len(every), 1, 4)]
        mine = {b.documents[3] for b in first}
        assert len(mine) == len(first) == N // 4
        seen |= mine
    assert len(seen) >= N * 3 // 4


def _look(rows: tuple[list[list[float]], list[list[float]]], look: int, looks: int = 4) -> Decision:
    """The decision at ``look`` over the batches the stages up to it ran (a full rotation)."""
    plan = Plan(cells=(CELL,), reference_cells=(), order=tuple(range(N)), seed=0)
    every = plan.batches(CELL)
    seats = {
        (p, d)
        for k in range(1, look + 1)
        for i in stage(CELL, len(every), k, looks)
        for p, d in enumerate(every[i].documents)
    }
    agreement, quality = rows
    keep = [[v if (p, i) in seats else math.nan for i, v in enumerate(r)] for p, r in enumerate(agreement)]
    keep_q = [[v if (p, i) in seats else math.nan for i, v in enumerate(r)] for p, r in enumerate(quality)]
    _, cs = scored(CELL, keep, keep_q)
    return decide(
        (CELL,),
        {CELL: cs},
        {1: levels_of(Q1)},
        {},
        None,
        design=DESIGN,
        tolerance=0.02,
        alpha=look_alpha(0.01, look, looks),
    )


def _going(decision: Decision) -> tuple[str, ...]:
    return running(
        decision.cells,
        decision.engine_wide,
        N,
        tolerance=0.02,
        alpha=0.01,
        share=per_test_share(decision.family, decision.engine_share is not None),
        beta=look_beta(4),
    )


Q1 = [random.Random(5).uniform(0.45, 0.85) for _ in range(N)]


def test_outputs_identical_to_batch_size_one_settle_at_the_first_look() -> None:
    rows = ([[1.0] * N for _ in range(8)], [list(Q1) for _ in range(8)])
    assert _going(_look(rows, 1)) == ()


def test_gross_damage_settles_at_the_first_look_with_its_positions_found() -> None:
    rng = random.Random(2)
    agreement = [[1.0] * N if p < 4 else [rng.uniform(0.05, 0.2) for _ in Q1] for p in range(8)]
    quality = [list(Q1) if p < 4 else [rng.uniform(0.0, 0.1) for _ in Q1] for p in range(8)]
    decision = _look((agreement, quality), 1)
    assert decision.cells[0].degraded_positions == (4, 5, 6, 7)
    assert _going(decision) == ()


def test_damage_as_large_as_the_fixed_design_detects_is_rarely_stopped_as_clean() -> None:
    """A test whose true mean drop is the fixed design's detectable drop: over the interim looks
    the futility bound stops it as clean in at most BETA of the runs (here: none of 400)."""
    rng = random.Random(7)
    sd, share = 0.1, per_test_share(100, False)
    detectable = min_detectable_drop(N, sd, tolerance=0.02, alpha=0.01, share=share)
    stopped = 0
    for _ in range(400):
        drops = [rng.gauss(detectable, sd) for _ in range(N)]
        for k in (1, 2, 3):
            seen = drops[: math.ceil(k * N / 4)]
            m = sum(seen) / len(seen)
            se = math.sqrt(sum((x - m) ** 2 for x in seen) / (len(seen) - 1) / len(seen))
            test = DropTest(drop=m, p_value=1.0, n=len(seen), se=se)
            if clean(test, N, 0.02, 0.01, share, look_beta(4)):
                stopped += 1
                break
    assert stopped <= BETA * 400
    assert clean(DropTest(drop=0.0, p_value=1.0, n=16, se=0.0), N, 0.02, 0.01, share, look_beta(4))
    assert not clean(
        DropTest(drop=0.0, p_value=1.0, n=16), N, 0.02, 0.01, share, look_beta(4)
    )  # no se: no bound
    assert not clean(DropTest(drop=0.1, p_value=1.0, n=16, se=0.01), N, 0.02, 0.01, share, look_beta(4))


class _FailsAloneLater:
    """An engine whose batch-size-1 calls fail once it has answered four of them."""

    def __init__(self) -> None:
        self.alone = 0

    def generate(self, prompts: list[str], settings: object) -> list[object]:
        from harness.engines.base import Generation

        if len(prompts) == 1:
            self.alone += 1
            if self.alone > 4:
                raise RuntimeError("the single-request path broke")
        return [Generation(text=" ".join(p.split()[:8])) for p in prompts]


def test_a_sequential_run_whose_batch_size_one_fails_reports_it_and_stops(
    tmp_path: Path, small_dataset: Path
) -> None:
    """Batch size 1 is answered look by look; when it fails, the cells of its beam width cannot
    be scored, are reported as such and stop: no later look asks batch size 1 again."""
    from harness.config import DatasetOptions, RunConfig
    from tests.integration.common import run_here

    engine = _FailsAloneLater()
    config = RunConfig(
        data=DatasetOptions(dataset=str(small_dataset)),
        batch_sizes=(2, 4),
        beam_widths=(1,),
        report_dir=tmp_path / "r",
        no_cache=True,
    )
    report = run_here(config, engine=engine).report
    assert engine.alone == 5  # the failing call, and none after it
    assert all(c.error is not None for c in report.cells), [c.error for c in report.cells]
    assert "the single-request path broke" in " ".join(c.error or "" for c in report.cells)
    assert report.verdict == "error" or report.verdict == "fail"


def test_a_position_damaged_on_a_share_of_prompts_elsewhere_is_clean_only_once_enough_were_seen() -> None:
    """bs4-beam2 lost position 3 on a fifth of its prompts (degraded, or only suspicious at
    an interim look). bs4-beam1's first look saw 16 prompts there, all identical to batch size
    1's: no spread, so the t-bound rules out any drop, yet 16 prompts miss a fifth of them with
    chance 0.8^16 = 2.8%, above the futility level. It stopped as clean and passed where the
    fixed design fails it; it now runs on until 32 prompts (0.8^32 = 0.08%) rule the damage
    out."""
    from dataclasses import replace

    from tests.unit.cell_results import clean_cell

    hit = clean_cell(Cell(4, 2), degraded=(3,))
    hit = replace(
        hit, positions=tuple(replace(s, differing=0.2) if s.position == 3 else s for s in hit.positions)
    )
    for seen, going in ((16, True), (32, False)):
        quiet = clean_cell(Cell(4, 1))
        quiet = replace(quiet, positions=tuple(replace(s, n=seen) for s in quiet.positions))
        still = running([hit, quiet], None, N, tolerance=0.02, alpha=0.01, share=1e-4, beta=look_beta(4))
        assert (quiet.id in still) is going and hit.id not in still
    # damage on every prompt there leaves nothing to miss: a clean look of 16 settles
    whole = replace(
        hit, positions=tuple(replace(s, differing=1.0) if s.position == 3 else s for s in hit.positions)
    )
    quiet = clean_cell(Cell(4, 1))
    assert running([whole, quiet], None, N, tolerance=0.02, alpha=0.01, share=1e-4, beta=look_beta(4)) == ()


def test_a_suspicious_position_holds_the_same_position_of_other_cells_only_by_its_excess_changes() -> None:
    """At an interim look the damage is often only suspicious (uncorrected p 0.01, a loss of
    0.09): a fifth of the outputs changed there against none elsewhere holds position 3 of
    the other cells open; the same suspicion where no more outputs changed than at the other
    positions (benign drift) holds nothing."""
    from dataclasses import replace

    from harness.model.analysis import DropTest
    from tests.unit.cell_results import clean_cell

    def seen(differing: float, background: float) -> list[str]:
        hit = clean_cell(Cell(4, 2))
        lossy = DropTest(drop=0.09, p_value=0.01, n=16)
        hit = replace(
            hit,
            positions=tuple(
                replace(s, differing=differing, quality_test=lossy)
                if s.position == 3
                else replace(s, differing=background)
                for s in hit.positions
            ),
        )
        quiet = clean_cell(Cell(4, 1))
        quiet = replace(quiet, positions=tuple(replace(s, n=16) for s in quiet.positions))
        return list(running([hit, quiet], None, N, tolerance=0.02, alpha=0.01, share=1e-4, beta=look_beta(4)))

    assert "bs4-beam1" in seen(0.2, 0.0)
    assert "bs4-beam1" not in seen(0.3, 0.3)


def test_the_engine_wide_test_is_clean_only_against_what_the_whole_rotation_would_spread() -> None:
    """A full-batch slot: after the first look the engine-wide test held a mean drop of 0.024
    (se 0.004) over 59 prompts, each a mean over a quarter of the outputs it gets in the end.
    Judged as if the fixed design spread as widely, its bound lay under the drop that design
    detects and the test was taken for clean; the fixed design flags it (drop 0.034, p < 1e-12).
    With a quarter of the outputs in, the whole rotation's spread may be half this look's, and
    then the bound is not under it."""
    from harness.model.analysis import DropTest, EngineWide
    from harness.verdict.sequential import engine_settled

    engine = EngineWide(test=DropTest(drop=0.024, p_value=0.3, n=59, se=0.004), cells=("bs8-beam1",))
    settle = dict(tolerance=0.02, alpha=0.01, share=per_test_share(136, True), beta=look_beta(4))
    assert engine_settled(engine, N, **settle, generated=1.0)
    assert not engine_settled(engine, N, **settle, generated=0.25)


def test_a_run_that_stops_with_the_engine_wide_test_open_does_not_call_it_a_pass() -> None:
    """A cell failed at the first look and every cell stopped; the engine-wide test was neither
    flagged nor clean. The report says it was not settled, with what it had, instead of its
    'within the tolerance' or 'not significantly' of a finished test."""
    from dataclasses import replace

    from harness.model.analysis import DropTest, EngineWide, Looks
    from harness.verdict.decide import Decision
    from harness.verdict.sequential import with_open_engine

    engine = EngineWide(
        test=DropTest(drop=0.024, p_value=0.3, n=59, se=0.004), cells=("bs8-beam1",), message="x"
    )
    decision = Decision(cells=(), boundaries=(), family=136, engine_wide=engine)
    looked = Looks(looks=4, interim_share=0.05, beta=0.01, spent=864, fixed=2880, engine_open=True)
    said = with_open_engine(decision, looked).engine_wide
    assert said is not None and said.message.startswith(
        "engine-wide test not settled: the run stopped once a cell"
    )
    assert "a mean drop of 0.024 below batch size 1 over 59 prompts" in said.message
    assert with_open_engine(decision, replace(looked, engine_open=False)) == decision
