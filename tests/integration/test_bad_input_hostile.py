"""Issue 15, the hostile round: inputs and events that are not usage errors. Each runs through
``python -m harness run`` and ``pytest suites/`` (in this process, an Echo engine: seconds)
and asserts the exit status, at most one line of error with its words, no traceback, and
what the fix keeps or shows: class 1 the cache key, 5 Ctrl-C and a full disk, 8b the scoring
cap, 10 Markdown in names. What the same round refuses as a usage error is in the other
test_bad_input_*.py modules.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.common import Suites, echo_engine, grid_options
from tests.integration.conftest import HERE, Setup, run_cli, run_pytest
from tests.integration.test_disk_full import fill_generations


@dataclass(frozen=True)
class Hostile:
    id: str
    args: Callable[[Setup], list[str]]
    codes: tuple[int, int]  # exit status of `run`, of `pytest suites/`
    words: tuple[str, ...] = ()  # in the one line of error ((): no error line at all)
    before: Callable[[Setup, pytest.MonkeyPatch], object] = lambda s, mp: None  # each run
    check: Callable[[Path], object] = lambda folder: None  # the newest report folder


def _echo(s: Setup, name: str = "echo-engine", backend: str = "fault_engines:Echo", *extra: str) -> list[str]:
    """A folder engine (so the generation cache is on) answered by a fault engine."""
    return [
        "--engine",
        str(echo_engine(s.tmp, name)),
        "--backend",
        backend,
        *grid_options(s.dataset, "1,2", "1"),
        *extra,
    ]


def _change_weights(s: Setup, mp: pytest.MonkeyPatch) -> None:
    """Class 1: a first run fills the cache, then the engine's weights change under it."""
    args = _echo(s) + [
        "--report-dir",
        str(s.tmp / "seed"),
        "--cache-dir",
        str(s.tmp / "cache"),
        "--goldens-dir",
        str(s.tmp / "no-goldens"),
    ]
    assert run_cli(args)[0] == 0
    s.engine_runs += 1
    (s.tmp / "echo-engine" / "weights.bin").write_text(f"other weights {s.engine_runs}")


def _nothing_from_cache(folder: Path) -> None:
    cache = json.loads((folder / "report.json").read_text())["cache"]
    assert cache["enabled"] and cache["generations_from_cache"] == 0, cache


def _disk_fills(s: Setup, mp: pytest.MonkeyPatch) -> None:
    """Class 5: generations.jsonl has room for about one cell, then the disk is full."""
    fill_generations(mp, len(s.dataset.read_bytes()) // 4)


def _capped(folder: Path) -> None:
    report = json.loads((folder / "report.json").read_text())
    for cell in report["cells"]:
        [check] = [c for c in cell["limit_checks"] if c["name"] == "output_length"]
        assert check["status"] == "warn" and "ran past 8 x --max-new-tokens words" in check["message"]
    rows = (folder / "generations.jsonl").read_text().splitlines()
    assert all(len(json.loads(r)["output"].split()) > 300 for r in rows)  # kept whole


NAME = "x`\n# PASS <b>*|_[x]"


def _escaped(folder: Path) -> None:
    from harness.report.markdown import md

    lines = (folder / "report.md").read_text().splitlines()
    headings = [line for line in lines if line.startswith("#")]
    assert headings[0].startswith("# Batch-position report:") and not any(
        "PASS <" in h or h.startswith("# PASS") for h in headings
    ), headings
    assert any(line.startswith("- Engine: ") and md(str(Path(NAME).name)) in line for line in lines)
    assert "run by me\\\\n\\# FAIL" in lines[lines.index("## Sign-off") + 2]


HOSTILE = [
    Hostile(
        "cache-after-the-weights-change",
        _echo,
        (0, 0),  # 1: the key covers engine files
        before=_change_weights,
        check=_nothing_from_cache,
    ),
    Hostile(
        "ctrl-c-while-generating",
        lambda s: _echo(s, "echo-engine", "fault_engines:Interrupts"),
        (130, 130),
        (
            "interrupted:",
            "kept in the generation cache",
            "generations.jsonl",
            "rerun the same command to resume",
        ),
    ),  # 5
    Hostile(
        "disk-full-while-generations-stream",
        _echo,
        (2, 4),  # 5
        (
            "generations.jsonl: cannot write (No space left on device)",
            "the 1 cells completed before are kept in it",
        ),
        before=_disk_fills,
    ),
    Hostile(
        "runaway-outputs-are-scored-capped",  # 8b: ROUGE-L on 8 x --max-new-tokens words
        lambda s: _echo(s, "echo-engine", "fault_engines:Runaway", "--max-new-tokens", "8"),
        (0, 0),
        before=lambda s, mp: mp.setenv("RUNAWAY_WORDS", "400"),
        check=_capped,
    ),
    Hostile(
        "names-with-markdown-in-report-md",  # 10
        lambda s: _echo(s, NAME, "fault_engines:Echo", "--signoff-by", "me\n# FAIL"),
        (0, 0),
        check=_escaped,
    ),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c.id for c in HOSTILE])
def test_hostile_run(
    case: Hostile, tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch, suites: Suites
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    setup = Setup(
        tmp=tmp_path, engine=tmp_path / "unused", dataset=small_dataset, goldens=tmp_path / "unused"
    )
    args = [
        *case.args(setup),
        "--report-dir",
        str(tmp_path / "reports"),
        "--goldens-dir",
        str(tmp_path / "no-goldens"),
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    for kind, code in zip(("run", "pytest"), case.codes):
        with pytest.MonkeyPatch.context() as mp:
            case.before(setup, mp)
            got, out = run_cli(args) if kind == "run" else run_pytest(suites, args)
        assert got == code, f"{kind}: {out}"
        assert "Traceback" not in out and "KeyboardInterrupt" not in out, f"{kind}: {out}"
        if kind == "run":
            errors = [
                line for line in out.splitlines() if line.startswith("error:") or "interrupted:" in line
            ]
            assert len(errors) == (1 if case.words else 0), out
        for words in case.words:
            assert words in out, f"{kind}: {out}"
        if not case.words:
            folders = sorted((tmp_path / "reports").glob("*/report.json"), key=lambda p: p.stat().st_mtime_ns)
            case.check(folders[-1].parent)
