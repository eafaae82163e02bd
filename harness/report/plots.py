"""Heatmaps of ROUGE-L by batch position, as inline SVG for the self-contained report."""

from __future__ import annotations

import io
from collections.abc import Sequence

from harness.results import CellEntry


def heatmap_svg(beam_width: int, cells: Sequence[CellEntry]) -> str:
    """One beam width: rows are batch sizes, columns batch positions; degraded cells crossed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = sorted(cells, key=lambda c: c.batch_size)
    width = max(len(c.positions) for c in rows)
    grid = np.full((len(rows), width), np.nan)
    for i, c in enumerate(rows):
        for p in c.positions:
            grid[i, p.position] = p.rouge_l
    fig, ax = plt.subplots(figsize=(1.0 + 0.62 * width, 0.9 + 0.48 * len(rows)), dpi=100)
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#eeeeee")
    image = ax.imshow(grid, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for i, c in enumerate(rows):
        for p in c.positions:
            j, value = p.position, p.rouge_l
            label = f"{value:.2f}"
            ax.text(j, i, label, ha="center", va="center", fontsize=8,
                    color="white" if value < 0.35 else "black",
                    fontweight="bold" if p.degraded else "normal")
            if p.degraded:
                ax.add_patch(matplotlib.patches.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                                          edgecolor="black", linewidth=2.2))
        if c.verdict == "error":
            ax.text(width / 2 - 0.5, i, "engine error", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(width), [str(j) for j in range(width)])
    ax.set_yticks(range(len(rows)), [f"bs{c.batch_size}" for c in rows])
    ax.set_xlabel("batch position")
    ax.set_title(f"beam width {beam_width}: ROUGE-L vs baseline (boxed = degraded)", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg")
    plt.close(fig)
    svg = out.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML prolog and doctype: the SVG sits inline in HTML
