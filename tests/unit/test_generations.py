from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.generations import GenerationsLog


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
