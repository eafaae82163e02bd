"""Heatmaps by batch position, as inline SVG for the self-contained report.

Each square shows what the verdict weighed there: the number is the position's quality
against the references (its agreement with the baseline where the dataset has no references),
and the colour is the larger of the two drops the verdict tests (below batch size 1 in quality,
below the other positions of the batch in agreement) in units of the tolerance: green under
it, yellow at it, red from three times it. A degraded position is red whatever its drop, and
hatched and boxed, so it can never look healthy.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.model.analysis import PositionStats
from harness.model.report import CellResult
from harness.model.vocab import Verdict

if TYPE_CHECKING:
    from matplotlib.figure import Figure

RED_AT = 3.0  # drops of this many tolerances or more are full red
# Text size (points) in a figure about 6 inches wide: scaled to a 390-pixel phone window the
# numbers are still about 8 pixels high (tests/unit/test_report.py renders the page at 390 px).
LABEL_PT = 11
MIN_WIDTH_IN = 5.0  # inches: the title's longer line at LABEL_PT, with the colour bar


def severity(p: PositionStats, tolerance: float) -> float:
    """The larger tested drop in tolerances (0 where nothing is tested); RED_AT if degraded."""
    drops = [t.drop for t in (p.quality_test, p.position_test) if t is not None]
    x = max([0.0, *drops]) / tolerance if tolerance > 0 else (RED_AT if p.degraded else 0.0)
    return max(x, RED_AT) if p.degraded else min(x, RED_AT)


def heatmap_svg(beam_width: int, cells: Sequence[CellResult], tolerance: float) -> str:
    """One beam width: rows are batch sizes, columns batch positions, as inline SVG."""
    import matplotlib.pyplot as plt

    fig = heatmap_figure(beam_width, cells, tolerance)
    out = io.StringIO()
    fig.savefig(out, format="svg")
    plt.close(fig)
    svg = out.getvalue()
    svg = svg[svg.index("<svg") :]  # drop the XML prolog and doctype: the SVG sits inline in HTML
    # scale with the page (phones): the viewBox keeps the drawing, CSS sets the width
    return svg.replace("<svg ", '<svg preserveAspectRatio="xMinYMin meet" ', 1)


def heatmap_figure(beam_width: int, cells: Sequence[CellResult], tolerance: float) -> Figure:
    """The heatmap as a matplotlib figure (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LinearSegmentedColormap

    rows = sorted(cells, key=lambda c: c.batch_size)
    width = max(len(c.positions) for c in rows)
    grid = np.full((len(rows), width), np.nan)
    for i, c in enumerate(rows):
        for p in c.positions:
            grid[i, p.position] = severity(p, tolerance)
    cmap = LinearSegmentedColormap.from_list(
        "drop", [(0.0, "#1a9850"), (0.5 / RED_AT, "#a6d96a"), (1.0 / RED_AT, "#fee08b"), (1.0, "#d73027")]
    ).with_extremes(bad="#eeeeee")
    # at least as wide as the two-line title, which a narrow grid (few positions) would clip
    fig, ax = plt.subplots(figsize=(max(MIN_WIDTH_IN, 1.2 + 0.62 * width), 1.3 + 0.5 * len(rows)), dpi=100)
    image = ax.imshow(grid, cmap=cmap, vmin=0.0, vmax=RED_AT, aspect="auto")
    for i, c in enumerate(rows):
        for p in c.positions:
            j = p.position
            ax.text(
                j,
                i,
                f"{p.shown:.2f}",
                ha="center",
                va="center",
                fontsize=LABEL_PT,
                color="black",
                fontweight="bold" if p.degraded else "normal",
            )
            if p.degraded:
                ax.add_patch(
                    matplotlib.patches.Rectangle(
                        (j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="black", linewidth=2.2
                    )
                )
        if c.verdict == Verdict.ERROR:
            ax.text(width / 2 - 0.5, i, "engine error", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(width), [str(j) for j in range(width)], fontsize=LABEL_PT)
    ax.set_yticks(range(len(rows)), [f"bs{c.batch_size}" for c in rows], fontsize=LABEL_PT)
    ax.set_xlabel("batch position", fontsize=LABEL_PT)
    measured = (
        "quality vs references"
        if any(p.quality is not None for c in rows for p in c.positions)
        else "agreement with baseline"
    )
    ax.set_title(
        f"beam width {beam_width}: {measured}\ncolour = drop / tolerance; hatched = degraded",
        fontsize=LABEL_PT,
    )
    bar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, ticks=[0, 1, 2, RED_AT])
    bar.ax.set_yticklabels(["0", "1x", "2x", f">={RED_AT:g}x"], fontsize=LABEL_PT - 1)
    fig.tight_layout()
    return fig
