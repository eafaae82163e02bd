"""Where a beam width's batch sizes start failing: the boundary per beam width (report.json
``boundaries``) and the line that names it, from the cells' verdicts.

A size fails when its cell fails or the engine could not run it (``error``); a cell that did
not run as asked (``untested``) says nothing about its size and is left out. Batch-dependent
bugs sit at thresholds (a CUDA-graph ladder, a buffer sized without the beam factor), so the
line says the sizes that pass below the first failing one, the first failing size with the
positions damaged from there on, and the sizes that pass again above it (a ladder's captured
sizes).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.model.report import Boundary, CellResult
from harness.model.vocab import Verdict
from harness.verdict.messages import ranges

FAILING = (Verdict.FAIL, Verdict.ERROR)


def sizes_text(sizes: Sequence[int]) -> str:
    """[1, 2, 4] -> '1, 2, 4'; [1, 2, 3, 4, 8] -> '1–4, 8': runs of three or more as ranges."""
    runs: list[list[int]] = []
    for size in sorted(sizes):
        if runs and size == runs[-1][-1] + 1:
            runs[-1].append(size)
        else:
            runs.append([size])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) >= 3 else ", ".join(map(str, r)) for r in runs)


def _pass(sizes: Sequence[int]) -> str:
    """'batch size 8 passes', 'batch sizes 1–4 pass'."""
    one = len(sizes) == 1
    return f"batch size{'' if one else 's'} {sizes_text(sizes)} pass{'es' if one else ''}"


def boundary(beam_width: int, cells: Sequence[CellResult]) -> Boundary:
    """The boundary of one beam width over its cells (any order)."""
    ran = sorted(
        (c for c in cells if c.beam_width == beam_width and c.verdict in (Verdict.PASS, *FAILING)),
        key=lambda c: c.batch_size,
    )
    tested = tuple(c.batch_size for c in ran)
    failed = [c for c in ran if c.verdict in FAILING]
    if not failed:
        said = (
            f"beam {beam_width}: every batch size tested passes ({sizes_text(tested)})"
            if tested
            else f"beam {beam_width}: no batch size ran as asked"
        )
        return Boundary(beam_width, tested, tested[-1] if tested else None, None, said)
    first = failed[0].batch_size
    below = [c.batch_size for c in ran if c.batch_size < first]
    above = [c.batch_size for c in ran if c.batch_size > first and c.verdict == Verdict.PASS]
    positions = sorted({p for c in failed for p in c.degraded_positions})
    errors = [c.batch_size for c in failed if c.error]
    how = []
    if positions:
        how.append(f"positions {ranges(positions)}")
    if errors:
        how.append(f"engine error at batch size{'s' if len(errors) > 1 else ''} {sizes_text(errors)}")
    said = (
        f"beam {beam_width}: "
        + (f"{_pass(below)}; " if below else "")
        + f"fails from {first}"
        + (f" ({'; '.join(how)})" if how else "")
        + (f"; {_pass(above)} again" if above else "")
    )
    return Boundary(beam_width, tested, below[-1] if below else None, first, said)


def boundaries(cells: Sequence[CellResult]) -> tuple[Boundary, ...]:
    """One boundary per beam width of the cells, in order of beam width."""
    return tuple(boundary(w, cells) for w in sorted({c.beam_width for c in cells}))
