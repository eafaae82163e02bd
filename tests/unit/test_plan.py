from __future__ import annotations

from collections import Counter

import pytest

from harness.errors import ConfigError
from harness.model.cell import Cell
from harness.model.vocab import Rotation
from harness.plan import choose_batch_sizes, make_plan, shard_cells


@pytest.mark.parametrize("n, b", [(8, 8), (64, 8), (13, 4), (5, 2), (7, 1)])
def test_every_prompt_visits_every_position_once_in_full_batches(n: int, b: int) -> None:
    plan = make_plan((b,), (1,), n, seed=3)
    batches = plan.batches(Cell(b, 1))
    assert len(batches) == n
    assert all(len(batch.documents) == b for batch in batches)
    assert all(len(set(batch.documents)) == b for batch in batches)  # distinct prompts
    visits = Counter((pos, doc) for batch in batches for pos, doc in enumerate(batch.documents))
    assert set(visits) == {(p, d) for p in range(b) for d in range(n)}
    assert set(visits.values()) == {1}


def test_plan_is_seeded() -> None:
    assert make_plan((4,), (1,), 20, 1).order == make_plan((4,), (1,), 20, 1).order
    assert make_plan((4,), (1,), 20, 1).order != make_plan((4,), (1,), 20, 2).order


def test_reference_cells_and_sequences() -> None:
    plan = make_plan((8,), (4,), 64, 0)
    assert plan.cells == (Cell(8, 4),)
    assert plan.all_cells == (Cell(1, 4), Cell(8, 4))
    assert plan.sequences() == 64 * 9


def test_fewer_prompts_than_positions_is_an_error() -> None:
    with pytest.raises(ConfigError, match="at least 8 prompts"):
        make_plan((1, 8), (1,), 5, 0)


def test_default_batch_sizes_capped_by_engine() -> None:
    assert choose_batch_sizes(None, 4) == (1, 2, 4)
    assert choose_batch_sizes(None, None) == (1, 2, 4, 8)
    assert choose_batch_sizes((16,), 4) == (16,)  # explicit sizes are kept; the limits test fails them


@pytest.mark.parametrize("count", [1, 2, 3, 5, 12])
def test_shards_partition_the_grid_deterministically(count: int) -> None:
    plan = make_plan((1, 2, 4, 8), (1, 2, 4), 64, 0)
    parts = [shard_cells(plan.cells, k, count) for k in range(1, count + 1)]
    assert sorted(c.id for part in parts for c in part) == sorted(c.id for c in plan.cells)  # once each
    assert all(parts) and parts == [shard_cells(plan.cells, k, count) for k in range(1, count + 1)]
    for part in parts:  # report order kept
        assert list(part) == [c for c in plan.cells if c in part]
    work = [sum(c.batch_size * c.beam_width for c in part) for part in parts]
    assert max(work) - min(work) <= max(c.batch_size * c.beam_width for c in plan.cells)


def test_shard_plan_generates_the_reference_cells_it_needs() -> None:
    plan = make_plan((1, 2, 4, 8), (1, 2, 4), 64, 0)
    shards = [plan.shard(k, 2) for k in (1, 2)]
    for s in shards:
        widths = {c.beam_width for c in s.cells}
        assert s.reference_cells == tuple(Cell(1, w) for w in (1, 2, 4) if w in widths)
        assert set(s.reference_cells) <= set(s.all_cells)
        for w in widths:  # each width's reference comes before that width's cells
            assert [c for c in s.all_cells if c.beam_width == w][0] == Cell(1, w)
        widths_in_order = [c.beam_width for c in s.all_cells]
        assert widths_in_order == sorted(widths_in_order)  # one engine load per beam width
        assert s.order == plan.order
    only_beam4 = make_plan((2, 8), (1, 4), 16, 0).shard(1, 4)
    assert only_beam4.cells == (Cell(8, 4),) and only_beam4.reference_cells == (Cell(1, 4),)
    assert only_beam4.all_cells == (Cell(1, 4), Cell(8, 4))


def test_more_shards_than_cells_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"--shard 1/5: the grid has 4 cell\(s\).*at most 4 shards"):
        shard_cells(make_plan((1, 2), (1, 2), 8, 0).cells, 1, 5)


def test_sparse_rotation_puts_each_prompt_at_one_position_per_cell() -> None:
    from harness.plan import make_plan

    full = make_plan((1, 4, 8), (1, 2), 64, seed=3)
    sparse = make_plan((1, 4, 8), (1, 2), 64, seed=3, rotation=Rotation.SPARSE)
    for cell in sparse.cells:
        batches = sparse.batches(cell)
        assert len(batches) == 64 // cell.batch_size
        seen = [d for b in batches for d in b.documents]
        assert sorted(seen) == list(range(64))  # every prompt once, at one position
    assert [len(sparse.batches(c)) for c in sparse.reference_cells] == [64, 64]  # bs1 stays full
    assert sparse.sequences() == 64 * 2 + 2 * (64 + 64)
    assert full.sequences() == 64 * 2 + 2 * (64 * 4 + 64 * 8)
    assert "--rotation sparse would need 384 sequences" in full.describe()
    assert "sparse rotation; --rotation full would need 1,664 sequences" in sparse.describe()


def test_sparse_rotation_wraps_when_the_batch_size_does_not_divide() -> None:
    from harness.model.cell import Cell
    from harness.plan import make_plan

    plan = make_plan((4,), (1,), 22, seed=0, rotation=Rotation.SPARSE)
    batches = plan.batches(Cell(4, 1))
    assert len(batches) == 6 and all(len(b.documents) == 4 for b in batches)
    assert set(d for b in batches for d in b.documents) == set(range(22))


def test_sparse_rotation_refuses_too_few_prompts_per_position() -> None:
    from harness.errors import ConfigError
    from harness.plan import make_plan

    with pytest.raises(ConfigError, match="leaves 2 prompt.s. per position.*at least 40 prompts"):
        make_plan((1, 8), (1,), 16, seed=0, rotation=Rotation.SPARSE)


def test_the_plan_line_counts_cells_under_test_and_names_the_baseline_apart() -> None:
    from harness.plan import make_plan

    only = make_plan((8,), (4,), 64, seed=0)
    assert only.describe() == (
        "plan: 576 sequences in 128 batches over 1 cell under test and "
        "the batch-size-1 baseline bs1-beam4 (full rotation; --rotation "
        "sparse would need 128 sequences)"
    )
    grid = make_plan((1, 2, 4, 8), (1, 2, 4), 64, seed=0)
    assert "over 12 cells under test (full rotation" in grid.describe()
