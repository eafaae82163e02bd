"""report.html: one self-contained page (inline CSS and SVG, no scripts, no network).

Every string that comes from a model, a dataset or a path goes through jinja2's
autoescaping; only the SVG that matplotlib drew from numbers is inserted as markup.
"""

from __future__ import annotations

import dataclasses

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from harness.limits.preflight import gib
from harness.model.analysis import shown_p
from harness.model.report import CellResult, Report
from harness.report.compare import Comparison
from harness.report.plots import heatmap_svg
from harness.report.summary import design_lines
from harness.verdict.messages import ranges


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("harness.report", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["gib"] = gib
    env.filters["ranges"] = ranges
    env.filters["f2"] = lambda x: "–" if x is None else f"{x:.2f}"
    env.filters["f3"] = lambda x: "–" if x is None else f"{x:.3f}"
    env.filters["p"] = shown_p
    return env


def render_report(report: Report) -> str:
    """The sign-off page for one run."""
    by_beam: dict[int, list[CellResult]] = {}
    for c in report.cells:
        by_beam.setdefault(c.beam_width, []).append(c)
    heatmaps = [
        (w, Markup(heatmap_svg(w, cells, report.method.tolerance)))
        for w, cells in sorted(by_beam.items())
        if any(c.positions for c in cells)
    ]
    limits = dataclasses.asdict(report.limits) if report.limits else None
    return (
        _env()
        .get_template("report.html.j2")
        .render(r=report, heatmaps=heatmaps, limits=limits, design=design_lines(report))
    )


def render_compare(comparison: Comparison) -> str:
    """The page for ``python -m harness compare --html``."""
    return _env().get_template("compare.html.j2").render(c=comparison)
