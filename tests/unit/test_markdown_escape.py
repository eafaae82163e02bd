"""Issue 15, class 10: report.md takes no string from outside raw. An engine folder named with a
backtick and a newline, a dataset file and a sign-off name full of Markdown markup are shown as
literal text (report.markdown.md): no line of report.md but the real heading starts with '#',
nothing breaks out of the header list, and the markup characters are backslash-escaped."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from harness.report.markdown import md

HOSTILE = "x`\n# PASS\r\n| a | b |\u2028<b>*bold*</b> _it_ [link](http://e) ~~s~~ &amp; !"


def test_md_leaves_no_line_break_and_no_unescaped_markup() -> None:
    text = md(HOSTILE)
    assert "\n" not in text and "\r" not in text and "\u2028" not in text
    assert text.startswith("x\\`\\\\n\\# PASS\\\\r\\\\n\\| a \\| b \\|\\\\u2028\\<b\\>\\*bold\\*")
    for ch in "`#|<>*_[]~&!":
        assert all(text[i - 1] == "\\" for i, c in enumerate(text) if c == ch), ch
    assert md("plain words, numbers 0.25 and ROUGE-L (x); kept") == (
        "plain words, numbers 0.25 and ROUGE-L (x); kept"
    )
    assert md("tab\there") == "tab here" and md(None) == "None"


def test_report_md_shows_outside_names_escaped(
    tmp_path: Path, engine_factory: Callable[[int, int], Path], small_dataset: Path
) -> None:
    from harness.__main__ import main

    engine = tmp_path / "x`\n# PASS"
    shutil.copytree(engine_factory(2, 1), engine)
    dataset = tmp_path / "d|*_[1]`.jsonl"
    shutil.copy(small_dataset, dataset)
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        code = main(
            [
                "run",
                "--engine",
                str(engine),
                "--dataset",
                str(dataset),
                "--batch-sizes",
                "1,2",
                "--beam-widths",
                "1",
                "--max-new-tokens",
                "4",
                "--num-prompts",
                "4",
                "--no-cache",
                "--signoff-by",
                "me\n# PASS <b>*",
                "--report-dir",
                str(tmp_path / "reports"),
                "--goldens-dir",
                str(tmp_path / "goldens"),
            ]
        )
    assert code in (0, 1), out.getvalue()
    [folder] = (tmp_path / "reports").glob("*")
    report = json.loads((folder / "report.json").read_text())
    assert report["engine"]["path"] == str(engine)  # the JSON keeps the name as it is
    lines = (folder / "report.md").read_text().splitlines()
    headings = [line for line in lines if line.startswith("#")]
    assert headings[0].startswith("# Batch-position report: **")
    assert all(h.startswith("## ") for h in headings[1:]), headings
    assert not any("PASS" in h for h in headings[1:]), headings
    [engine_line] = [line for line in lines if line.startswith("- Engine: ")]
    assert md(str(engine)) in engine_line and "x\\`\\\\n\\# PASS" in engine_line
    [dataset_line] = [line for line in lines if line.startswith("- Dataset: ")]
    assert "d\\|\\*\\_\\[1\\]\\`" in dataset_line
    signoff = lines[lines.index("## Sign-off") + 2]
    assert "run by me\\\\n\\# PASS \\<b\\>\\*;" in signoff and md(str(engine)) in signoff
    assert "<b>" not in "\n".join(lines)
