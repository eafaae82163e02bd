"""The options that choose how much a run generates where, beyond its grid and rotation: the
sparse screen's follow-up and the full rotation's looks (docs/method.md)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.bounds import Range
from harness.config.option import option
from harness.config.parse import non_negative_real, positive_int
from harness.model.vocab import Receiver


@dataclass(frozen=True)
class DesignOptions:
    """The adaptive parts of a run's design (``harness.verdict.follow_up``,
    ``harness.verdict.sequential``)."""

    follow_up: float = option(
        0.5,
        "--follow-up",
        "sparse rotation (and --sweep): the share of the screen's sequences the run may spend again on more "
        "rotation of the cells whose screen saw something, tested apart (default {default}; 0: a fixed sparse "
        "design; see docs/method.md)",
        Receiver.PLAN,
        parse=non_negative_real,
        bound=Range(
            0.0, 8.0, "a share of the screen's sequences, 0 (none) to 8 (a full rotation of most grids)"
        ),
        metavar="SHARE",
    )
    looks: int = option(
        4,
        "--looks",
        "full rotation: generate in this many equal stages, look at the scores after each and stop a cell "
        "once each of its tests is settled (default {default}; 1: the fixed design; see docs/method.md)",
        Receiver.PLAN,
        parse=positive_int,
        bound=Range(None, 16, "more looks spend alpha on looks that cannot stop anything"),
        metavar="K",
    )
