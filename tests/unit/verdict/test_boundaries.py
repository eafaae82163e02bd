"""Where a beam width's batch sizes start failing (harness.verdict.boundaries)."""

from __future__ import annotations

from harness.model.cell import Cell
from harness.model.report import CellResult
from harness.model.vocab import Verdict
from harness.verdict.boundaries import boundaries, boundary
from tests.unit.cell_results import clean_cell


def _cell(
    size: int, beams: int, verdict: Verdict, degraded: tuple[int, ...] = (), error: str | None = None
) -> CellResult:
    """The cell ``size`` x ``beams`` with ``verdict``: failing on its ``degraded`` positions,
    an engine ``error``, or untested (answered one request at a time)."""
    notice = "answered one request at a time" if verdict == Verdict.UNTESTED else None
    cell = clean_cell(Cell(size, beams), quality=0.5, degraded=degraded, error=error, notice=notice)
    assert cell.verdict == verdict, cell
    return cell


P, F = Verdict.PASS, Verdict.FAIL


def test_a_ladder_names_its_first_failing_size_and_the_sizes_that_pass_again() -> None:
    """#17964: 1-4 pass, 5-7 run padded in the graph of 8 and fail, 8 passes."""
    cells = [
        _cell(8, 1, P),
        *(_cell(b, 1, P) for b in (1, 2, 3, 4)),
        _cell(5, 1, F, (4,)),
        _cell(6, 1, F, (4, 5)),
        _cell(7, 1, F, (4, 5, 6)),
    ]
    b = boundary(1, cells)
    assert (b.last_passing, b.first_failing, b.tested) == (4, 5, (1, 2, 3, 4, 5, 6, 7, 8))
    assert (
        b.message == "beam 1: batch sizes 1–4 pass; fails from 5 (positions 4–6); batch size 8 passes again"
    )


def test_every_size_passing_or_the_smallest_failing_or_an_engine_error() -> None:
    assert boundary(2, [_cell(1, 2, P), _cell(8, 2, P)]).message == (
        "beam 2: every batch size tested passes (1, 8)"
    )
    b = boundary(4, [_cell(1, 4, F, (0,))])
    assert (b.last_passing, b.first_failing) == (None, 1)
    b = boundary(2, [_cell(1, 2, P), _cell(8, 2, P), _cell(16, 2, Verdict.ERROR, error="RuntimeError: x")])
    assert (b.last_passing, b.first_failing) == (8, 16)
    assert b.message == "beam 2: batch sizes 1, 8 pass; fails from 16 (engine error at batch size 16)"


def test_untested_cells_say_nothing_about_their_size_and_widths_are_kept_apart() -> None:
    cells = [
        _cell(1, 1, P),
        _cell(4, 1, Verdict.UNTESTED),
        _cell(8, 1, F, (7,)),
        _cell(1, 2, P),
        _cell(8, 2, P),
    ]
    got = boundaries(cells)
    assert [(b.beam_width, b.tested, b.last_passing, b.first_failing) for b in got] == [
        (1, (1, 8), 1, 8),
        (2, (1, 8), 8, None),
    ]
