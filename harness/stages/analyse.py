"""Stage 4, analyse: the run's decision (``harness.verdict.decide``) over what the stages
produced: the cells under test in plan order, the grid as the design of the Holm family, each
cell's padding shortfall from the plan, and what generation learned of each cell (build-limit
checks and outputs cut to the scoring cap, engine errors, cells not run as asked)."""

from __future__ import annotations

from harness.model.analysis import FollowUp, Looks
from harness.stages.generate import output_checks
from harness.stages.run import Generated, Prepared, Scored
from harness.verdict.decide import Decision, decide
from harness.verdict.schedules import Flights
from harness.verdict.sequential import with_open_engine


def analyse(
    prep: Prepared,
    generated: Generated,
    scored: Scored,
    followed: FollowUp | None = None,
    *,
    alpha: float | None = None,
    looked: Looks | None = None,
    flights: Flights | None = None,
) -> Decision:
    """The decision of one run (rank 0's); ``followed``: what its sparse screen's follow-up
    spent (None: the design has none); ``alpha``: the share of --alpha this look's family is
    corrected at (a sequential design's looks; None: all of it); ``looked``: where a sequential
    run stopped each cell (a cell stopped before the last look holds part of its rotation);
    ``flights``: its scheduled cells, decided in the same Holm family."""
    config, plan, lengths = prep.config, prep.plan, prep.lengths()
    decision = decide(
        plan.cells,
        scored.cells,
        scored.levels,
        {cell: plan.shortfall(cell, lengths) for cell in scored.cells},
        prep.limits,
        design=prep.grid or plan.cells,
        tolerance=config.tolerance,
        alpha=config.alpha if alpha is None else alpha,
        deterministic=config.deterministic,
        checks=output_checks(prep.checks, generated.capped, config.max_new_tokens),
        errors={**generated.errors, **scored.unscored},
        notices={c: out.notice for c, out in generated.outputs.items()},
        follows_up=followed is not None,
        partial=frozenset(
            c
            for c in plan.cells
            if looked is not None and looked.decided.get(c.id, looked.looks) < looked.looks
        ),
        flights=flights,
    )
    return with_open_engine(decision, looked)
