"""The method on small seeded cases: a healthy or drifting engine passes, each fault fails at
exactly the damaged positions and the failure names the fault's signature.

These run the whole pipeline (generation, scoring, analysis, signatures) on 16 prompts;
``python -m harness calibrate`` measures the same at scale (docs/method.md).
"""

from __future__ import annotations

import pytest

from harness.config import RunConfig
from harness.engines.emulator.build import BuildLimits, build_engine
from harness.engines.emulator.faults import parse_fault
from harness.pipeline import run

CASES = [
    # fault, build limits (batch, beam), batch sizes, beam widths, {cell: degraded}, signature
    ("healthy", (8, 4), "4,8", "1,2", {}, None),
    ("drift", (8, 4), "8", "1", {}, None),
    ("full-batch", (8, 4), "4,8", "1", {"bs8-beam1": [7]}, "full-batch"),
    ("padding", (8, 4), "4", "1", {"bs4-beam1": [0, 1, 2, 3]}, "padding"),
    ("stride", (8, 4), "4", "1,2", {"bs4-beam2": [1, 2, 3]}, "stride"),
    ("partial:fraction=1.0,position=3", (8, 4), "8", "1", {"bs8-beam1": [3]}, "single"),
    ("overflow", (8, 1), "4,8", "2", {"bs8-beam2": [4, 5, 6, 7]}, "overflow"),
]


@pytest.mark.parametrize("fault, limits, sizes, widths, damaged, signature", CASES,
                         ids=[c[0].split(":")[0] for c in CASES])
def test_each_fault_fails_exactly_where_it_damages(tmp_path, small_dataset, fault, limits, sizes,
                                                   widths, damaged, signature):
    spec = None if fault in ("healthy", "overflow") else parse_fault(fault, max_batch_size=8)
    engine = build_engine(tmp_path / "engine", BuildLimits(max_batch_size=limits[0],
                                                           max_beam_width=limits[1]), fault=spec)
    config = RunConfig.from_options({
        "engine": str(engine), "dataset": str(small_dataset), "batch_sizes": sizes,
        "beam_widths": widths, "max_new_tokens": "24", "report_dir": str(tmp_path / "r"),
        "goldens_dir": str(tmp_path / "g"), "no_cache": True})
    result = run(config)
    found = {c.cell.id: list(c.analysis.degraded_positions) for c in result.cells
             if c.analysis and c.analysis.verdict == "fail"}
    assert found == damaged
    assert all(c.error is None for c in result.cells)
    kinds = {c.finding.kind for c in result.cells if c.finding}
    assert kinds == ({signature} if signature else set())
