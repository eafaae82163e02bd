"""What a cell says: its one-line verdict naming the degraded positions and the evidence, the
notes on outputs with no text and on changed outputs without a loss, and position lists
written as ranges (the reports and the fault signatures write them the same way)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.model.analysis import DropTest, PositionStats, shown_p
from harness.model.scores import mean


def ranges(positions: Sequence[int]) -> str:
    """[2, 3, 4, 7] -> '2–4, 7'."""
    out: list[str] = []
    items = sorted(positions)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}–{items[j]}")
        i = j + 1
    return ", ".join(out)


def _span(values: Sequence[float]) -> str:
    lo, hi = f"{min(values):.2f}", f"{max(values):.2f}"
    return lo if lo == hi else f"{lo}–{hi}"


def cell_message(
    cell_id: str,
    row: Sequence[PositionStats],
    bad: Sequence[int],
    spread: DropTest | None,
    nondeterministic: Sequence[int],
    level: float,
) -> str:
    """The cell's one-line verdict, naming the positions and the evidence."""
    if bad:
        noun = "position" if len(bad) == 1 else "positions"
        parts = []
        by_quality = [row[p] for p in bad if (t := row[p].quality_test) is not None and t.flagged]
        by_position = [(row[p], t) for p in bad if (t := row[p].position_test) is not None and t.flagged]
        if by_quality:  # a quality test exists only where the position's quality does
            bs1 = mean([s.quality_bs1 for s in by_quality if s.quality_bs1 is not None])
            quality = [s.quality for s in by_quality if s.quality is not None]
            parts.append(f"quality vs references {_span(quality)} vs {bs1:.2f} at batch size 1")
        if by_position:
            worst = max(t.drop for _, t in by_position)
            parts.append(
                f"agreement with the baseline {_span([s.agreement for s, _ in by_position])}"
                f", up to {worst:.2f} below the other positions"
            )
        said = {s.position for s in by_quality} | {s.position for s, _ in by_position}
        by_change = [
            (row[p], t) for p in bad if p not in said and (t := row[p].change_test) is not None and t.flagged
        ]
        if by_change:  # only this test: sparse damage, some prompts hit hard
            parts.append(
                f"{_span([s.differing for s, _ in by_change])} of outputs changed from "
                f"batch size 1, up to {max(t.drop for _, t in by_change):.2f} more than "
                "at the other positions, with a loss there"
            )
        again = [row[p].follow_up for p in bad]
        confirmed = [f for f in again if f is not None and f.degraded]
        if confirmed:  # the sparse screen's follow-up: new prompts at these positions
            tests = [
                t
                for f in confirmed
                for t in (f.position_test, f.quality_test, f.change_test)
                if t and t.flagged
            ]
            lo, hi = min(f.n for f in confirmed), max(f.n for f in confirmed)
            parts.append(
                f"the follow-up confirmed position{'s' if len(confirmed) > 1 else ''} "
                f"{ranges([f.position for f in confirmed])} over {lo if lo == hi else f'{lo}–{hi}'} more prompts: "
                f"agreement {_span([f.agreement for f in confirmed])}, adjusted p "
                f"{shown_p(min(t.p_adjusted if t.p_adjusted is not None else 1.0 for t in tests))}"
            )
        return f"{cell_id}: {noun} {ranges(bad)} degraded ({'; '.join(parts)})"
    if spread is not None:
        return (
            f"{cell_id}: quality against the references drops across positions (mean drop "
            f"{spread.drop:.3f} below batch size 1 over {len(row)} positions, adjusted p "
            f"{shown_p(spread.p_adjusted)}) though no single position is significant alone"
        )
    if nondeterministic:
        share = mean([row[p].differing for p in nondeterministic])
        return (
            f"{cell_id}: outputs differ from batch size 1 at positions {ranges(nondeterministic)} "
            f"({share:.0%} of them there; --deterministic expects every output to equal batch "
            "size 1's)"
        )
    return f"{cell_id}: no degraded position (batch size 1 level {level:.2f})"


def empty_note(cell_id: str, row: Sequence[PositionStats], positions: Sequence[int]) -> str:
    """What a cell with outputs that have no text says: why it cannot pass."""
    share = mean([s.empty for s in row]) if row else 0.0
    return (
        f"{cell_id}: {share:.0%} of outputs have no text ROUGE-L can score (empty, blank, "
        f"only punctuation or symbols, or not text) at position"
        f"{'s' if len(positions) != 1 else ''} {ranges(positions)}: nothing there was "
        "measured, and an engine that returns no text at every batch size passes every test "
        "against batch size 1, so this is a finding, never a pass"
    )


def drift_note(
    cell_id: str,
    differing: float,
    quality: float | None,
    quality_bs1: float | None,
    concentrated: Sequence[int] = (),
) -> str | None:
    """What a cell that changed outputs without losing quality says (a finding, not a failure);
    ``concentrated``: positions where more outputs changed than at the others (their change
    test flagged) without a loss there."""
    if differing <= 0:
        return None
    said = f"{cell_id}: {differing:.0%} of outputs differ from batch size 1"
    if quality is not None and quality_bs1 is not None:
        said += f"; quality against references {quality:.3f} vs {quality_bs1:.3f}"
    if concentrated:
        return said + (
            f"; more of them at position{'s' if len(concentrated) > 1 else ''} "
            f"{ranges(concentrated)} than at the others, without a loss there"
        )
    return said + "; not position-dependent"


def engine_message(test: DropTest, cells: Sequence[str], cells_failed: bool, tolerance: float) -> str:
    """What the engine-wide test says: pooled over every batched output, quality below batch
    size 1's by more than the tolerance (or not); ``cells_failed``: some cell fails on its own."""
    pooled = (
        f"engine-wide: mean quality against the references {test.drop:.3f} below batch size 1 "
        f"over every batched output of {len(cells)} cells ({test.n} prompts, adjusted p "
        f"{shown_p(test.p_adjusted)})"
    )
    if not test.flagged and test.drop <= tolerance:
        return f"{pooled}: within the tolerance {tolerance}"
    if not test.flagged:
        return f"{pooled}: beyond the tolerance {tolerance}, but not significantly"
    if cells_failed:
        return f"{pooled}: the batched outputs lose quality beyond the tolerance {tolerance}"
    return (
        f"{pooled}: damage spread over the engine, beyond the tolerance {tolerance}, though no "
        "cell shows it alone"
    )
