from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.storage.generations import CellTexts, GenerationsLog

if TYPE_CHECKING:
    from harness.config import DecodingSettings
    from harness.engines.base import Generation


def test_cells_are_written_as_rows_and_read_back_by_position(tmp_path: Path) -> None:
    log = GenerationsLog(tmp_path / "generations.jsonl", ["d0", "d1", "d2"])
    a = log.add("bs1-beam1", CellTexts(held=(("x", "y", "z"),)))
    b = log.add("bs2-beam1", CellTexts(held=(("p0 \u00e9", "", "\u4e2d"), ("q0", "q1\nline", "q2"))))
    log.close()
    assert a.spill is not None and b.spill is not None  # only where the rows lie is kept
    assert list(a.rows()) == [("x", "y", "z")]
    assert b.row(1) == ("q0", "q1\nline", "q2") and b.row(0) == ("p0 \u00e9", "", "\u4e2d")
    assert len(b) == 2
    with pytest.raises(IndexError):
        b.row(2)
    rows = [json.loads(line) for line in (tmp_path / "generations.jsonl").read_text().splitlines()]
    assert rows[0] == {"cell": "bs1-beam1", "position": 0, "id": "d0", "output": "x"}
    assert [(r["cell"], r["position"], r["id"]) for r in rows[3:]] == [
        ("bs2-beam1", p, d) for p in (0, 1) for d in ("d0", "d1", "d2")
    ]


def test_reading_while_more_cells_are_appended(tmp_path: Path) -> None:
    log = GenerationsLog(tmp_path / "g.jsonl", ["d0"])
    first = log.add("c1", CellTexts(held=(("one",),)))
    assert first.row(0) == ("one",)
    second = log.add("c2", CellTexts(held=(("two",), ("three",))))
    assert first.row(0) == ("one",) and second.row(1) == ("three",) and second.row(0) == ("two",)
    log.close()
    log.close()  # twice is fine


class BeamEcho:
    """Test double of an engine that returns every beam (no model)."""

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        from harness.engines.base import Generation

        out = []
        for p in prompts:
            best = " ".join(p.split()[:8])
            out.append(Generation(text=best, beams=tuple(f"{best} #{k}" for k in range(settings.beam_width))))
        return out


@pytest.mark.parametrize("rotation", ["full", "sparse"])
def test_generations_file_holds_every_output_and_beam_where_it_sat(
    tmp_path: Path, small_dataset: Path, rotation: str
) -> None:
    """generations.jsonl, written cell by cell, holds every output the engine gave, at the
    position it sat at, with every beam (sparse positions left out); the run keeps only
    where each position's rows start and reads the same texts back from there."""
    from harness.config import DatasetOptions, DesignOptions, RunConfig
    from harness.model.vocab import Rotation
    from harness.pipeline import RunOutcome, execute, prepare
    from harness.stages.generate import generate_all
    from harness.storage.generations import GenerationsLog

    config = RunConfig(
        data=DatasetOptions(dataset=str(small_dataset)),
        batch_sizes=(1, 2),
        beam_widths=(1, 2),
        rotation=Rotation(rotation),
        no_cache=True,
        report_dir=tmp_path / "streamed",
        design=DesignOptions(
            looks=1
        ),  # every planned batch (a sequential run stops where its answer is known)
    )
    # prepare() adopts any object with generate(); harness annotates it Engine (the full protocol)
    prep = prepare(config, engine=BeamEcho())
    ids = [d.id for d in prep.dataset.documents]
    result = execute(prep)
    assert isinstance(result, RunOutcome)
    expected = []
    for cell in prep.plan.all_cells:
        seated = sorted(
            (position, doc)
            for batch in prep.plan.batches(cell)
            for position, doc in enumerate(batch.documents)
        )
        for position, doc in seated:
            best = " ".join(prep.prompts[doc].split()[:8])
            row: dict[str, object] = {"cell": cell.id, "position": position, "id": ids[doc], "output": best}
            if cell.beam_width > 1:
                row["beams"] = [f"{best} #{k}" for k in range(cell.beam_width)]
            expected.append(row)
    lines = (result.folder / "generations.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == expected
    # the generate stage keeps where each position's rows start and reads the texts back from there
    log = GenerationsLog(tmp_path / "again.jsonl", ids, root=tmp_path)
    try:
        generated = generate_all(prepare(config, engine=BeamEcho()), log=log)
    finally:
        log.close()
    for out in generated.outputs.values():
        assert out.texts.spill is not None
        for position, texts in enumerate(out.texts.rows()):
            assert texts == tuple(
                next(
                    (
                        r["output"]
                        for r in expected
                        if r["cell"] == out.cell.id and r["position"] == position and r["id"] == doc
                    ),
                    None,
                )
                for doc in ids
            )
