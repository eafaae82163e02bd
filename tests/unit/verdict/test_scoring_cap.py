"""Issue 15, class 8 (second half): what is scored is bounded. Each output is scored on its
first 8 x --max-new-tokens words (at most 64 x --max-new-tokens characters), so no output
makes ROUGE-L (quadratic in length) unbounded; a capped output is a warning in its cell, and
generations.jsonl keeps it whole. rouge_l itself is untouched."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from harness.config import RunConfig
from harness.pipeline import RunOutcome, run
from tests.integration.common import run_options

HERE = Path(__file__).resolve().parents[2] / "integration"


def test_cut_keeps_short_texts_and_cuts_long_ones_to_a_prefix() -> None:
    from harness.bounds import ScoringCap

    cap = ScoringCap.for_tokens(2)  # 16 words, 128 characters
    assert (cap.words, cap.chars) == (16, 128)
    short = "one two three  "
    assert cap.cut(short) is short
    exact = " ".join(["w"] * 16) + "   \n"  # exactly the cap: unchanged, spaces and all
    assert cap.cut(exact) == exact
    long = " ".join(f"w{i}" for i in range(100))
    assert cap.cut(long) == " ".join(f"w{i}" for i in range(16)) and long.startswith(cap.cut(long))
    solid = "x" * 10_000  # one 'word' of 10,000 characters: the character cap holds
    assert cap.cut(solid) == "x" * 128


def test_runaway_outputs_are_scored_capped_and_reported(
    tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    values = run_options(
        tmp_path,
        small_dataset,
        "1,2",
        report="reports",
        cache=None,
        engine="fault_engines:Runaway",
        max_new_tokens="8",
        looks=1,
    )
    started = time.perf_counter()
    result = run(RunConfig.from_options(values))
    assert time.perf_counter() - started < 120
    assert isinstance(result, RunOutcome)
    report = json.loads((result.folder / "report.json").read_text())
    assert report["verdict"] == "pass"  # the same runaway text everywhere: no position worse
    for cell in report["cells"]:
        [check] = [c for c in cell["limit_checks"] if c["name"] == "output_length"]
        n = 16 * cell["batch_size"]
        assert check["status"] == "warn" and check["message"].startswith(
            f"{n} outputs ran past 8 x --max-new-tokens words (64, at most 512 characters)"
        )
        assert cell["limits_verdict"] == "pass"
    rows = [json.loads(line) for line in (result.folder / "generations.jsonl").read_text().splitlines()]
    assert all(len(r["output"].split()) > 20_000 for r in rows)  # kept whole
    md = (result.folder / "report.md").read_text()
    assert "- **bs2-beam1** output\\_length: 32 outputs ran past" in md  # escaped: report.md
