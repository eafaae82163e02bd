from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.storage.generations import GenerationsLog


def test_cells_are_written_as_rows_and_read_back_by_position(tmp_path: Path):
    log = GenerationsLog(tmp_path / "generations.jsonl", ["d0", "d1", "d2"])
    a = log.add("bs1-beam1", [("x", "y", "z")])
    b = log.add("bs2-beam1", [("p0 \u00e9", "", "\u4e2d"), ("q0", "q1\nline", "q2")])
    log.close()
    assert list(a) == [("x", "y", "z")]
    assert b[1] == ("q0", "q1\nline", "q2") and b[-2] == ("p0 \u00e9", "", "\u4e2d")
    assert b[0:2] == (b[0], b[1]) and len(b) == 2
    assert b == [["p0 \u00e9", "", "\u4e2d"], ["q0", "q1\nline", "q2"]]
    with pytest.raises(IndexError):
        b[2]
    rows = [json.loads(line) for line in (tmp_path / "generations.jsonl").read_text().splitlines()]
    assert rows[0] == {"cell": "bs1-beam1", "position": 0, "id": "d0", "output": "x"}
    assert [(r["cell"], r["position"], r["id"]) for r in rows[3:]] == [
        ("bs2-beam1", p, d) for p in (0, 1) for d in ("d0", "d1", "d2")]


def test_reading_while_more_cells_are_appended(tmp_path: Path):
    log = GenerationsLog(tmp_path / "g.jsonl", ["d0"])
    first = log.add("c1", [("one",)])
    assert first[0] == ("one",)
    second = log.add("c2", [("two",), ("three",)])
    assert first[0] == ("one",) and second[1] == ("three",) and second[0] == ("two",)
    log.close()
    log.close()  # twice is fine


class BeamEcho:
    """Test double of an engine that returns every beam (no model)."""

    def generate(self, prompts, settings):  # type: ignore[no-untyped-def]
        from harness.engines.base import Generation

        out = []
        for p in prompts:
            best = " ".join(p.split()[:8])
            out.append(Generation(text=best, beams=tuple(f"{best} #{k}" for k in range(settings.beam_width))))
        return out


@pytest.mark.parametrize("rotation", ["full", "sparse"])
def test_streamed_file_equals_the_rows_of_the_run_in_memory(tmp_path: Path, small_dataset: Path,
                                                              rotation: str):
    """generations.jsonl written cell by cell has exactly the rows the report writer makes
    from outputs kept in memory, beams and sparse positions included; the run keeps only
    offsets into it."""
    from harness.config import RunConfig
    from harness.pipeline import execute, prepare
    from harness.report.files import write_report
    from harness.stages.generate import generate_all
    from harness.storage.generations import SpilledTexts

    config = RunConfig(dataset=str(small_dataset), batch_sizes=(1, 2), beam_widths=(1, 2),
                       rotation=rotation, no_cache=True, report_dir=tmp_path / "streamed")
    streamed = execute(prepare(config, engine=BeamEcho()))
    assert all(isinstance(o.texts.whole, SpilledTexts) for o in streamed.outputs)  # scored cut

    prep = prepare(RunConfig(**{**config.__dict__, "report_dir": tmp_path / "memory"}), engine=BeamEcho())
    outputs = generate_all(prep, None).outputs  # no log: texts and beams stay in memory
    folder = tmp_path / "memory-report"
    folder.mkdir()
    write_report(streamed.__class__(**{**streamed.__dict__, "outputs": tuple(
        outputs[c] for c in prep.plan.all_cells if c in outputs)}), folder)
    expected = (folder / "generations.jsonl").read_text(encoding="utf-8")
    assert (streamed.report_dir / "generations.jsonl").read_text(encoding="utf-8") == expected
    assert '"beams": [' in expected
