"""The method on small seeded cases: a healthy or drifting engine passes, each fault fails at
exactly the damaged positions and the failure names the fault's signature.

These run the whole pipeline (generation, scoring, analysis, signatures) on 16 prompts;
``python -m harness calibrate`` measures the same at scale (docs/method.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import RunConfig
from harness.engines.emulator.build import build_engine, build_limits
from harness.engines.emulator.faults import parse_fault
from harness.report.summary import cell_lines
from tests.integration.common import EngineFactory, run_here, run_options

CASES = [
    # fault, build limits (batch, beam), batch sizes, beam widths, {cell: degraded}, signature
    ("healthy", (8, 4), "4", "1,2", {}, None),
    # a heavily drifting healthy engine: 60% of outputs at batch size 8 differ, none is worse
    ("drift:rate=0.6", (8, 4), "8", "1,2", {}, None),
    ("full-batch", (8, 4), "4,8", "1", {"bs8-beam1": [7]}, "full-batch"),
    ("padding", (8, 4), "4", "1", {"bs4-beam1": [0, 1, 2, 3]}, "padding"),
    # the bundled 64 prompts: the stride costs 0.10 of quality per position, past what 16 see
    ("stride", (8, 4), "8", "2", {"bs8-beam2": [1, 2, 3, 4, 5, 6, 7]}, "stride"),
    ("partial:fraction=1.0,position=3", (8, 4), "8", "1", {"bs8-beam1": [3]}, "single"),
    ("overflow", (8, 1), "4,8", "2", {"bs8-beam2": [4, 5, 6, 7]}, "overflow"),
]


@pytest.mark.slow  # every fault model generates
@pytest.mark.parametrize(
    "fault, limits, sizes, widths, damaged, signature", CASES, ids=[c[0].split(":")[0] for c in CASES]
)
def test_each_fault_fails_exactly_where_it_damages(
    tmp_path: Path,
    small_dataset: Path,
    fault: str,
    limits: tuple[int, int],
    sizes: str,
    widths: str,
    damaged: dict[str, list[int]],
    signature: str | None,
) -> None:
    spec = None if fault in ("healthy", "overflow") else parse_fault(fault, max_batch_size=8)
    engine = build_engine(
        tmp_path / "engine", build_limits(max_batch_size=limits[0], max_beam_width=limits[1]), fault=spec
    )
    # stride: the bundled prompts, and requests that finish before max_new_tokens, unevenly
    dataset, max_new_tokens = (None, "48") if fault == "stride" else (small_dataset, "24")
    # the fixed design: every signature read over the whole rotation (a cell a sequential run
    # stops early holds a part of it; tests/unit/verdict/test_signatures.py)
    options = run_options(
        tmp_path, dataset, sizes, widths, goldens="g", cache=False, max_new_tokens=max_new_tokens, looks=1
    )
    config = RunConfig.from_options({**options, "engine": str(engine)})
    result = run_here(config)
    found = {c.id: list(c.degraded_positions) for c in result.report.cells if c.verdict == "fail"}
    assert found == damaged
    assert all(c.error is None for c in result.report.cells)
    kinds = {c.pattern for c in result.report.cells if c.pattern}
    assert kinds == ({signature} if signature else set())


@pytest.mark.slow
def test_sparse_rotation_still_catches_the_incident_at_a_fraction_of_the_cost(
    tmp_path: Path, engine_factory: EngineFactory
) -> None:
    """--rotation sparse on the bundled 64 prompts: 8 prompts per position, 64 sequences for
    bs8-beam4 instead of 512, and the overflow positions are still found exactly."""
    options = run_options(
        tmp_path, None, "8", "4", goldens="g", cache=False, max_new_tokens="24", rotation="sparse"
    )
    config = RunConfig.from_options({**options, "engine": str(engine_factory(8, 1))})
    result = run_here(config)
    [cell] = result.report.cells
    assert cell.degraded_positions == (2, 3, 4, 5, 6, 7)
    assert [s.n for s in cell.positions] == [8] * 8
    assert result.report.method.sequences == 64 + 64
    assert cell.pattern == "overflow" and cell.cause is not None


@pytest.mark.slow  # the bundled prompts over four batched cells
def test_late_loss_spread_over_every_batched_cell_fails_the_engine(tmp_path: Path) -> None:
    """A share of the batched outputs diverge late: mild damage in every cell, which the
    engine-wide test finds and every report shows."""
    engine = build_engine(
        tmp_path / "engine", build_limits(), fault=parse_fault("late-loss:fraction=0.3", max_batch_size=8)
    )
    options = run_options(tmp_path, None, "1,2,4", "1,2", goldens="g", cache=False, max_new_tokens="24")
    result = run_here(RunConfig.from_options({**options, "engine": str(engine)}))
    report, e = result.report, result.report.engine_wide
    assert e is not None and e.failed and report.verdict == "fail", e
    assert e.cells == ("bs2-beam1", "bs4-beam1", "bs2-beam2", "bs4-beam2")
    assert e.message in (result.folder / "report.md").read_text()
    assert e.message.split(":")[0] in (result.folder / "report.html").read_text()
    [line] = [x for x in cell_lines(report) if x.strip().startswith("engine-wide")]
    assert "FAIL  mean drop" in line and "over 4 batched cells" in line
