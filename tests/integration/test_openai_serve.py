"""`pytest suites/ --engine http://127.0.0.1:P/v1` against `python -m harness serve`.

Real processes and real HTTP: the server is `python -m harness serve` on an emulator engine
in a process of its own, the suites run in this process (pytester) as a user runs them. 8
prompts and 32 new tokens keep each run short.
"""

from __future__ import annotations

import json
import re
import selectors
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SuitesRun, only_report
from tests.integration.common import EngineFactory, Suites, grid_options
from tests.processes import checkout_env, harness_command, start

FAST = ("--max-new-tokens", "32")
# a batch closes as soon as it is full, so the window only delays batches of one; 200 ms let
# a loaded CI machine (two xdist workers beside the server) split a batch of 8 into 6 + 2
WINDOW_MS = "1000"

pytestmark = pytest.mark.slow  # a server process per test, generating with the emulator


class Servers:
    """`python -m harness serve` processes on free ports, stopped with Ctrl-C (SIGINT)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, engine_dir: Path) -> str:
        """The base URL, once the server has printed its ready line."""
        serve = ("serve", "--engine", str(engine_dir), "--port", "0", "--batch-window-ms", WINDOW_MS)
        proc = start(harness_command(*serve), cwd=self.cwd, env=checkout_env())
        self.procs.append(proc)
        assert proc.stdout is not None  # stdout=PIPE
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout=180)
        line = proc.stdout.readline() if ready else ""
        match = re.match(r"serving \S+ at (http://127\.0\.0\.1:\d+/v1)", line)
        assert match, f"no ready line: {line!r}"
        return match.group(1)

    def stop(self) -> list[str]:
        """Ctrl-C every server; each must exit 0 without a traceback. Their stderr."""
        errs: list[str] = []
        while self.procs:
            proc = self.procs.pop()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0 and "Traceback" not in err, err
            errs.append(err)
        return errs


@pytest.fixture(scope="module")
def eight_prompts(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "eight.jsonl"
    path.write_text("".join(small_dataset.read_text().splitlines(keepends=True)[:8]))
    return path


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    running = Servers(tmp_path)
    yield running
    running.stop()


def _through(
    suites: Suites, url: str, dataset: Path, sizes: str, widths: str, report_dir: Path, *more: str
) -> SuitesRun:
    """`pytest suites/` through the server at ``url``, verbose; ``more``: other options."""
    # the fixed design: every planned batch reaches the server, which the tests count
    return suites(
        "--engine",
        url,
        *grid_options(dataset, sizes, widths),
        "--report-dir",
        str(report_dir),
        "-v",
        "--looks",
        "1",
        *FAST,
        *more,
    )


def test_healthy_engine_passes_through_the_server(
    tmp_path: Path, servers: Servers, engine_factory: EngineFactory, eight_prompts: Path, suites: Suites
) -> None:
    url = servers.start(engine_factory(8, 4))
    # the bulk cells alone: the server's engine batches are counted against the planned ones
    proc = _through(suites, url, eight_prompts, "1,4", "1,4", tmp_path / "r", "--schedules", "none")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    report = only_report(tmp_path / "r")
    assert report["verdict"] == "pass"
    assert [c["id"] for c in report["cells"]] == ["bs1-beam1", "bs4-beam1", "bs1-beam4", "bs4-beam4"]
    for c in report["cells"]:
        assert [p["agreement"] for p in c["positions"]] == [1.0] * c["batch_size"], c["id"]
    engine = report["engine"]
    assert engine["backend"] == "openai" and engine["path"] == url
    assert engine["identity"].startswith("server:bs8-bw4@sha256:")
    note = (
        "arrival slot: requests are sent concurrently in position order; the server's "
        "scheduler decides the real batch"
    )
    assert engine["details"]["position_semantics"] == note
    assert report["limits"] is None and report["cache"]["enabled"] is False
    folder = next((tmp_path / "r").glob("run-*"))
    assert f"- Batch position: {note}" in (folder / "report.md").read_text()
    assert (
        "arrival slot: requests are sent concurrently in position order"
        in (folder / "report.html").read_text()
    )
    # 8 prompts: 8 batches per cell, two cells per beam width -> 32 planned batches, and the
    # server ran exactly 32 engine batches: none split, none merged
    assert report["cache"]["batches_generated"] == 32
    [err] = servers.stop()
    assert "stopped after 32 engine batches" in err


def test_faulty_engine_is_caught_through_the_server(
    tmp_path: Path, servers: Servers, engine_factory: EngineFactory, eight_prompts: Path, suites: Suites
) -> None:
    """Built with max beam width 1, run with 4 beams at batch size 8: positions 2-7, as the
    emulator gives them directly."""
    broken = engine_factory(8, 1)
    url = servers.start(broken)
    proc = _through(suites, url, eight_prompts, "8", "4", tmp_path / "r")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "test_batch_positions[bs8-beam4] FAILED" in proc.stdout
    assert "bs8-beam4: positions 2–7 degraded (quality vs references" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    report = only_report(tmp_path / "r")
    [cell] = report["cells"]
    assert cell["id"] == "bs8-beam4" and cell["error"] is None
    assert cell["degraded_positions"] == [2, 3, 4, 5, 6, 7]

    # byte for byte what the emulator gives directly for the first planned batch of the cell
    from harness.config import RunConfig
    from harness.engines.emulator.engine import EmulatorEngine
    from harness.inputs.data import build_prompt, load_dataset
    from harness.model.cell import Cell
    from harness.plan import make_plan

    config = RunConfig(beam_widths=(4,), max_new_tokens=32)
    dataset = load_dataset(str(eight_prompts))
    plan = make_plan((8,), (4,), len(dataset), config.seed)
    batch = plan.batches(Cell(8, 4))[0]
    docs = [dataset.documents[d] for d in batch.documents]
    direct = EmulatorEngine(broken).generate(
        [build_prompt(config.prompt_template, d) for d in docs], config.decoding(4)
    )
    folder = next((tmp_path / "r").glob("run-*"))
    served = {
        (r["position"], r["id"]): r["output"]
        for r in map(json.loads, (folder / "generations.jsonl").read_text().splitlines())
        if r["cell"] == "bs8-beam4"
    }
    assert [served[(p, d.id)] for p, d in enumerate(docs)] == [g.text for g in direct]
