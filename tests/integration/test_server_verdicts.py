"""`pytest suites/ --engine http://...` against servers that do not do what the cells ask
(issue 14 A1, A2, A3, A5, A6; issue 15 item 11), end to end: the verdict, the pytest tests,
report.json, report.md and report.html.

The servers are ``tests.doubles.openai_server.BehavingServer``, a test double that behaves as
llama-cpp-python and llama-server were seen to behave (one request at a time; ``n`` greedy
copies; a crash on one prompt). The same behaviours from the real servers, replayed from their
recorded answers and live, are in tests/integration/test_llama_cpp_servers.py.

The double serves from threads of this process, where `pytest suites/` runs too (pytester):
a double that answers at once leaves the harness's timing nothing to judge a batch by (one
process's threads can then look one after another), so the tests whose batch-size-2 cells
must pass give it 0.08 s an answer, as a real server takes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.model.cell import Cell
from harness.report.markdown import md as escape
from harness.verdict.sequential import stage
from tests.conftest import only_report
from tests.integration.common import Behaving, Suites, first_rows, grid_options

FAST = ("--max-new-tokens", "8", "-v")


@pytest.fixture(scope="module")
def eight(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return first_rows(small_dataset, tmp_path_factory.mktemp("data") / "eight.jsonl", 8)


def _options(engine: str, dataset: Path, sizes: str, widths: str, report_dir: Path, *more: str) -> list[str]:
    """A run of ``engine`` on ``dataset`` at batch sizes ``sizes`` and beam widths ``widths``."""
    return [
        "--engine",
        engine,
        *grid_options(dataset, sizes, widths),
        *more,
        "--report-dir",
        str(report_dir),
        *FAST,
    ]


def _folder(root: Path) -> Path:
    return next(root.glob("run-*"))


def test_a_server_answering_one_request_at_a_time_leaves_its_cells_untested(
    tmp_path: Path, behaving: Behaving, eight: Path, suites: Suites
) -> None:
    server = behaving(serial=True, seconds=0.08)
    proc = suites(*_options(server.url, eight, "1,2,4", "1", tmp_path))
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:]
    assert "test_batch_positions[bs1-beam1] PASSED" in out
    for size in (2, 4):
        assert f"test_batch_positions[bs{size}-beam1] FAILED" in out
        assert (
            f"bs{size}-beam1: untested: the server answered these {size} requests one after "
            "another: batch positions were not exercised"
        ) in out
    report = only_report(tmp_path)
    cells = {c["id"]: c for c in report["cells"]}
    assert report["verdict"] == "fail" and cells["bs1-beam1"]["verdict"] == "pass"
    notice = cells["bs4-beam1"]["notice"]
    assert cells["bs4-beam1"]["verdict"] == "untested" and "one after another" in notice
    assert [p["agreement"] for p in cells["bs4-beam1"]["positions"]] == [1.0] * 4  # measured anyway
    md = (_folder(tmp_path) / "report.md").read_text()
    assert f"- **bs4-beam1**: {escape(notice)}" in md  # the cell named once
    # report.json keeps the analysis's own message beside the notice
    assert cells["bs4-beam1"]["message"].startswith("bs4-beam1: no degraded position")
    html = (_folder(tmp_path) / "report.html").read_text()
    assert (
        '<span class="tag untested">untested</span>' in html and "batch positions were not exercised" in html
    )


def test_a_server_running_requests_together_passes(
    tmp_path: Path, behaving: Behaving, eight: Path, suites: Suites
) -> None:
    server = behaving(serial=False, seconds=0.08, model="bundled-summarizer-2026-12")
    proc = suites(*_options(server.url, eight, "1,4", "1", tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = only_report(tmp_path)
    assert [c["verdict"] for c in report["cells"]] == ["pass", "pass"]
    assert all(c["notice"] is None for c in report["cells"])
    md = (_folder(tmp_path) / "report.md").read_text()
    assert "- Build limits: the engine records no build limits, so none were checked." in md
    identity = "server:bundled-summarizer-2026-12"  # 33 characters, once cut to 19
    assert f"- Engine: {escape(server.url)} (openai, {escape(identity)})" in md
    assert f"PASS for {escape(server.url)} ({escape(identity)}) at " in md
    # a server decides on prefix caching itself: the report says it is unknown, and why
    assert report["engine"]["kv_cache_reuse"]["setting"] == "unknown"
    assert "- KV-cache reuse across requests: unknown (a server decides" in md
    assert "KV-cache reuse across requests: unknown (a server decides" in proc.stdout


def test_kv_cache_reuse_on_is_refused_for_a_backend_that_cannot_set_it(
    suites: Suites,
) -> None:
    proc = suites("--kv-cache-reuse", "on")
    assert proc.returncode == 4
    [line] = [x for x in proc.stderr.splitlines() if x.strip()]
    assert "--kv-cache-reuse does not apply to the emulator backend" in line
    assert "Traceback" not in proc.stderr + proc.stdout


def test_beam_search_that_never_ran_fails_its_cells_with_the_reason(
    tmp_path: Path, behaving: Behaving, eight: Path, suites: Suites
) -> None:
    server = behaving(beams="copies", seconds=0.08)  # time enough to see bs2 served together
    proc = suites(*_options(server.url, eight, "1,2", "1,2", tmp_path))
    assert proc.returncode == 1, proc.stdout[-3000:]
    cells = {c["id"]: c for c in only_report(tmp_path)["cells"]}
    assert cells["bs1-beam1"]["verdict"] == cells["bs2-beam1"]["verdict"] == "pass"
    first = cells["bs1-beam2"]["error"]
    assert (
        "returned 2 identical choices for best_of 2 in each of its first 4 answers: no beam "
        "search ran" in first
    )
    assert "(the run's first failure: bs1-beam2, batch 4 of 8, prompt " in first
    later = cells["bs2-beam2"]["error"]
    assert later.startswith(
        "failed the same way as the run's first failure, bs1-beam2 (batch 4 of 8, prompt "
    )
    assert "test_batch_positions[bs2-beam2] FAILED" in proc.stdout


def test_a_server_that_crashes_mid_run_is_named_at_its_first_failure(
    tmp_path: Path, behaving: Behaving, eight: Path, suites: Suites
) -> None:
    server = behaving(crash_at=11)  # bs1-beam1: 8 batches; bs2-beam1: its 2nd batch
    proc = suites(*_options(server.url, eight, "1,2,4", "1", tmp_path, "--retries", "1"))
    # the batches as the run sends them: each cell's first stage from its own start in the ring
    crashed = stage(Cell(2, 1), 8, 1, 4)[1] + 1
    stopped = stage(Cell(4, 1), 8, 1, 4)[0] + 1
    assert proc.returncode == 1, proc.stdout[-3000:]
    cells = {c["id"]: c for c in only_report(tmp_path)["cells"]}
    assert cells["bs1-beam1"]["verdict"] == "pass"
    first = cells["bs2-beam1"]["error"]
    assert "failed 2 time(s) (--retries 1); first: RemoteDisconnected at position " in first
    assert "last: ConnectionRefusedError" in first
    assert f"(the run's first failure: bs2-beam1, batch {crashed} of 8, prompts " in first
    later = cells["bs4-beam1"]["error"]
    assert later.startswith(
        f"failed the same way as the run's first failure, bs2-beam1 (batch {crashed} of 8, prompts "
    )
    assert f"; this cell stopped at batch {stopped} of 8" in later
    md = (_folder(tmp_path) / "report.md").read_text()
    assert escape("failed the same way as the run's first failure, bs2-beam1") in md


def test_request_fields_reach_the_server_the_report_and_nothing_else(
    tmp_path: Path, behaving: Behaving, eight: Path, suites: Suites
) -> None:
    server = behaving(seconds=0.08)  # time enough to see bs2 served together
    key = "sk-SECRET-0123456789"
    url = f"{server.url}?api_key={key}"
    proc = suites(
        *_options(
            url,
            eight,
            "1,2",
            "1",
            tmp_path,
            "--request-field",
            "repeat_penalty=1.0",
            "--request-field",
            '{"top_k": 1, "stop": ["END"]}',
            "--looks",
            "1",  # every planned request, which the server counts
        )
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (
        all(b["repeat_penalty"] == 1.0 and b["top_k"] == 1 and b["stop"] == ["END"] for b in server.bodies)
        and len(server.bodies) == 24 + 4 * 8  # the bulk cells', then 4 schedules of the 8 prompts
    )
    assert all(p.endswith(f"?api_key={key}") for p in server.paths)
    report = only_report(tmp_path)
    assert report["options"]["request_fields"] == {"repeat_penalty": 1.0, "stop": ["END"], "top_k": 1}
    folder = _folder(tmp_path)
    md = (folder / "report.md").read_text()
    assert (
        '- Request fields sent with every request: repeat\\_penalty=1.0, stop=\\["END"\\], top\\_k=1'
    ) in md
    for name in ("report.json", "report.md", "report.html", "generations.jsonl"):
        assert key not in (folder / name).read_text(), name
    assert key not in proc.stdout + proc.stderr
    assert report["engine"]["path"] == f"{server.url}?api_key=REDACTED"
    assert json.dumps(report).count("REDACTED") >= 2  # engine path, options, sign-off


def test_request_fields_are_refused_for_the_bundled_engine_in_one_line(
    suites: Suites,
) -> None:
    proc = suites("--request-field", "repeat_penalty=1.0")
    assert proc.returncode == 4
    assert (
        "--request-field applies only to an OpenAI-compatible server: use it with --engine "
        "http://HOST:PORT/v1"
    ) in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
