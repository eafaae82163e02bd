from __future__ import annotations

from collections import Counter

import pytest

from harness.errors import ConfigError
from harness.plan import Cell, choose_batch_sizes, make_plan


@pytest.mark.parametrize("n, b", [(8, 8), (64, 8), (13, 4), (5, 2), (7, 1)])
def test_every_prompt_visits_every_position_once_in_full_batches(n, b):
    plan = make_plan((b,), (1,), n, seed=3)
    batches = plan.batches(Cell(b, 1))
    assert len(batches) == n
    assert all(len(batch.documents) == b for batch in batches)
    assert all(len(set(batch.documents)) == b for batch in batches)  # distinct prompts
    visits = Counter((pos, doc) for batch in batches for pos, doc in enumerate(batch.documents))
    assert set(visits) == {(p, d) for p in range(b) for d in range(n)}
    assert set(visits.values()) == {1}


def test_plan_is_seeded():
    assert make_plan((4,), (1,), 20, 1).order == make_plan((4,), (1,), 20, 1).order
    assert make_plan((4,), (1,), 20, 1).order != make_plan((4,), (1,), 20, 2).order


def test_reference_cells_and_sequences():
    plan = make_plan((8,), (4,), 64, 0)
    assert plan.cells == (Cell(8, 4),)
    assert plan.all_cells == (Cell(1, 4), Cell(8, 4))
    assert plan.sequences() == 64 * 9


def test_fewer_prompts_than_positions_is_an_error():
    with pytest.raises(ConfigError, match="at least 8 prompts"):
        make_plan((1, 8), (1,), 5, 0)


def test_default_batch_sizes_capped_by_engine():
    assert choose_batch_sizes(None, 4) == (1, 2, 4)
    assert choose_batch_sizes(None, None) == (1, 2, 4, 8)
    assert choose_batch_sizes((16,), 4) == (16,)  # explicit sizes are kept; the limits test fails them
