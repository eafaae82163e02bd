"""Issue 24 class 4: forged or unrelated reports do not pass ``compare``, and an engine cannot
pass by returning no text or by claiming token counts it never generated.

(a) a report whose integrity check fails is refused (exit 2, one line naming the file), not
    warned about; (b) verdicts edited to pass, even with the sha256 recomputed, are refused:
    compare checks every verdict against the report's own statistics and method, and with
    HARNESS_SIGNING_KEY a report must carry its run's HMAC; (c) runs of another dataset or
    other method settings are refused naming what differs, while another engine build is the
    use case; (d) outputs with no text fail their cell; (e) usage.completion_tokens above
    max_tokens is not evidence that a server ran a batch together.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.__main__ import main
from harness.config import DecodingSettings, RunConfig
from harness.engines.base import Generation
from harness.report.serialize import canonical_hash
from tests.doubles.openai_server import BehavingServer
from tests.integration.common import Behaving, first_rows, run_here, run_options
from tests.integration.toy_engine import ToyEngine

KEY = "HARNESS_SIGNING_KEY"


class OtherBuild(ToyEngine):
    """Another build of the toy engine: same outputs, another identity."""


def _run(tmp: Path, name: str, dataset: Path, engine: object, **options: str) -> Path:
    values = run_options(tmp, dataset, "1,4", report=name, cache=False, max_new_tokens="16")
    result = run_here(RunConfig.from_options({**values, **options}), engine=engine)
    return result.folder / "report.json"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, small_dataset: Path) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("runs")
    twelve = first_rows(small_dataset, tmp / "twelve.jsonl", 12)
    healthy, broken = ToyEngine(None, broken_from=-1), ToyEngine(None, broken_from=2)
    return {
        "good": _run(tmp, "good", small_dataset, healthy),
        "bad": _run(tmp, "bad", small_dataset, broken),
        "other-build": _run(tmp, "other-build", small_dataset, OtherBuild(None, broken_from=-1)),
        "other-dataset": _run(tmp, "other-dataset", twelve, healthy),
        "other-tolerance": _run(tmp, "other-tol", small_dataset, healthy, tolerance="0.05"),
        "other-tokens": _run(tmp, "other-tokens", small_dataset, healthy, max_new_tokens="32"),
        "other-grid": _run(tmp, "other-grid", small_dataset, healthy, batch_sizes="2"),
    }


def _compare(old: Path, new: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["compare", str(old), str(new)])
    got = capsys.readouterr()
    return code, got.out, got.err


def _forged(good: Path, bad: Path, *, p_values: bool = False) -> dict[str, Any]:
    """The failing run's report made to pass: verdicts, flags and the figures compare reads
    taken from the passing run (``p_values``: every p set to 1 as well)."""
    data: dict[str, Any] = json.loads(bad.read_text())
    healthy = {c["id"]: c for c in json.loads(good.read_text())["cells"]}
    data["verdict"] = data["signoff"]["verdict"] = "pass"
    for cell in data["cells"]:
        twin = healthy[cell["id"]]
        cell.update(
            verdict="pass",
            degraded_positions=[],
            message=twin["message"],
            cause=None,
            pattern=None,
            evidence=None,
            quality=twin["quality"],
            examples=[],
        )
        for position, theirs in zip(cell["positions"], twin["positions"]):
            position.update(degraded=False, agreement=theirs["agreement"], quality=theirs["quality"])
            for test in ("position_test", "quality_test", "change_test"):
                if position.get(test) is not None:
                    position[test]["flagged"] = False
                    if p_values:
                        position[test].update(p_value=1.0, p_adjusted=1.0)
        if cell["omnibus"] is not None:
            cell["omnibus"]["flagged"] = False
    if data["engine_wide"] is not None:
        data["engine_wide"]["test"]["flagged"] = False
        if p_values:
            data["engine_wide"]["test"].update(p_value=1.0, p_adjusted=1.0)
    return data


def _write(data: dict[str, Any], file: Path, *, reseal: bool) -> Path:
    if reseal:  # what anyone can do: the documented sha256, recomputed
        data["integrity"]["sha256"] = canonical_hash(data)
    file.write_text(json.dumps(data))
    return file


def test_the_genuine_comparison_is_worse(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _compare(runs["good"], runs["bad"], capsys)
    assert code == 1 and "verdict: worse" in out


# --- (a) a broken integrity check fails -------------------------------------------------------


def test_a_report_whose_sha256_does_not_match_is_refused(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edited = _write(_forged(runs["good"], runs["bad"]), tmp_path / "report.json", reseal=False)
    code, out, err = _compare(runs["good"], edited, capsys)
    assert code == 2, out + err
    assert "verdict:" not in out
    [line] = err.strip().splitlines()
    assert str(edited) in line and "sha256" in line and "changed after" in line


# --- (b) verdicts are checked against the report's own statistics -----------------------------


@pytest.mark.parametrize("p_values", [False, True], ids=["flags", "flags-and-p-values"])
def test_verdicts_edited_to_pass_with_a_recomputed_sha256_are_refused(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], p_values: bool
) -> None:
    forged = _write(
        _forged(runs["good"], runs["bad"], p_values=p_values), tmp_path / "report.json", reseal=True
    )
    code, out, err = _compare(runs["good"], forged, capsys)
    assert code == 2, out + err
    [line] = err.strip().splitlines()
    assert str(forged) in line and "do not follow from its own statistics" in line


def test_with_a_signing_key_only_reports_signed_by_it_compare(
    tmp_path: Path, small_dataset: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unkeyed sha256 proves nothing about who wrote a report: a consistent report relabelled
    as another build passes every check of its own. The HMAC of HARNESS_SIGNING_KEY does."""
    monkeypatch.setenv(KEY, "release-team-secret")
    good = _run(tmp_path, "good", small_dataset, ToyEngine(None, broken_from=-1))
    bad = _run(tmp_path, "bad", small_dataset, OtherBuild(None, broken_from=2))
    assert json.loads(good.read_text())["integrity"]["hmac"]
    code, out, err = _compare(good, bad, capsys)
    assert code == 1 and "verdict: worse" in out, out + err  # signed and genuine: compared

    # the passing run's report, relabelled as the failing build, sha256 recomputed
    relabelled = json.loads(good.read_text())
    relabelled["engine"] = json.loads(bad.read_text())["engine"]
    relabelled["signoff"]["identity"] = relabelled["engine"]["identity"]
    forged = _write(relabelled, tmp_path / "relabelled.json", reseal=True)
    code, out, err = _compare(good, forged, capsys)
    assert code == 2, out + err
    assert str(forged) in err and "HMAC" in err and "HARNESS_SIGNING_KEY" in err

    unsigned = json.loads(good.read_text())
    del unsigned["integrity"]["hmac"]
    code, _, err = _compare(good, _write(unsigned, tmp_path / "unsigned.json", reseal=True), capsys)
    assert code == 2 and "no HMAC" in err

    monkeypatch.delenv(KEY)  # without the key the signature cannot be checked: said, not hidden
    code, out, _ = _compare(good, bad, capsys)
    assert code == 1 and "HMAC not checked" in out


# --- (c) unrelated runs are refused --------------------------------------------------------


@pytest.mark.parametrize(
    ("other", "named"),
    [
        ("other-dataset", "dataset"),
        ("other-tolerance", "tolerance"),
        ("other-tokens", "max_new_tokens"),
        ("other-grid", "no cell in common"),
    ],
)
def test_runs_of_another_dataset_or_method_are_refused(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], other: str, named: str
) -> None:
    code, out, err = _compare(runs["good"], runs[other], capsys)
    assert code == 2, out + err
    [line] = err.strip().splitlines()
    assert named in line and "verdict:" not in out


def test_another_engine_build_on_the_same_test_is_compared_and_named(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _compare(runs["good"], runs["other-build"], capsys)
    assert code == 0, out + err
    assert "engine: OLD tests.integration.toy_engine:ToyEngine" in out
    assert "OtherBuild" in out and "verdict: same" in out


# --- (d) outputs with no text are a finding, never a pass --------------------------------------


class Returns:
    """A user's engine that returns ``value`` for every prompt."""

    def __init__(self, value: object) -> None:
        self.value = value

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[object]:
        return [self.value for _ in prompts]


@pytest.mark.parametrize(
    "value",
    ["", "   ", "... !!", "\u200b", b"bytes", 42, Generation(text="")],
    ids=["empty", "blank", "punctuation", "zero-width", "bytes", "int", "empty-generation"],
)
def test_an_engine_that_returns_no_text_passes_no_cell(
    tmp_path: Path, small_dataset: Path, value: object
) -> None:
    report = json.loads(_run(tmp_path, "r", small_dataset, Returns(value)).read_text())
    assert report["verdict"] == "fail"
    for cell in report["cells"]:
        assert cell["verdict"] == "fail", cell["message"]
        assert "no text" in cell["message"] and all(p["empty"] == 1.0 for p in cell["positions"])


class SilentAt:
    """Real text, but nothing at one batch position of the bigger batches."""

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[str]:
        return [
            "" if len(prompts) > 1 and i == 3 else " ".join(p.split()[:12]) for i, p in enumerate(prompts)
        ]


def test_no_text_at_one_position_fails_that_cell(tmp_path: Path, small_dataset: Path) -> None:
    report = json.loads(_run(tmp_path, "r", small_dataset, SilentAt()).read_text())
    cells = {c["id"]: c for c in report["cells"]}
    assert cells["bs1-beam1"]["verdict"] == "pass"
    assert cells["bs4-beam1"]["verdict"] == "fail"
    assert (
        "no text ROUGE-L can score (empty, blank, only punctuation or symbols, or not text) at position 3"
        in cells["bs4-beam1"]["message"]
    )
    assert [p["empty"] for p in cells["bs4-beam1"]["positions"]] == [0.0, 0.0, 0.0, 1.0]


# --- (e) token counts a server could not have generated ----------------------------------------


def test_token_counts_above_max_tokens_are_no_evidence_of_a_batch() -> None:
    from harness.engines.base import RequestTiming
    from harness.engines.batching import cell_notice, judge_batch
    from harness.model.vocab import Served

    def t(written: float, finished: float, tokens: int) -> RequestTiming:
        return RequestTiming(sent=0.0, written=written, first_byte=finished, finished=finished, tokens=tokens)

    texts = ["a short answer"] * 4
    honest = [t(0.001, 0.20, 16), t(0.002, 0.40, 16), t(0.003, 0.60, 16), t(0.004, 0.80, 16)]
    assert judge_batch(honest, texts, 16).verdict == Served.ONE_AFTER_ANOTHER
    # the same server, claiming a million tokens for every answer that queued behind another
    forged = [
        t(0.001, 0.20, 16),
        *(t(w, f, 1_000_000) for w, f in ((0.002, 0.40), (0.003, 0.60), (0.004, 0.80))),
    ]
    judged = judge_batch(forged, texts, 16)
    assert judged.verdict == Served.UNTRUSTED and "above its max_tokens 16" in judged.why
    notice = cell_notice([judged] * 4)
    assert notice is not None and "not plausible" in notice
    # far fewer tokens than the words of the text: not a count either
    words = ["one two three four five six seven eight nine ten eleven twelve thirteen"] * 4
    assert judge_batch([t(0.001, 0.2, 1), *honest[1:]], words, 16).verdict == Served.UNTRUSTED


@pytest.fixture
def forging(behaving: Behaving) -> BehavingServer:
    """A server that runs one request at a time and claims a million tokens for every answer
    that had to wait for the one before (what made it look as if it ran them together)."""
    from tests.doubles.openai_server import _Handler

    class Handler(_Handler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked = time.monotonic()
            with self.server.engine_lock:
                waited = time.monotonic() - asked > self.server.seconds / 2
                time.sleep(self.server.seconds)
            answer = self.server.answer(body)
            if waited:
                answer["usage"]["completion_tokens"] = 1_000_000
            self._send(answer)

    server = behaving(serial=True, seconds=0.08)
    server.RequestHandlerClass = Handler
    return server


def test_a_server_claiming_a_million_tokens_does_not_pass_as_batched(
    tmp_path: Path, small_dataset: Path, forging: BehavingServer
) -> None:
    eight = first_rows(small_dataset, tmp_path / "eight.jsonl", 8)
    values = run_options(tmp_path, eight, "1,4", cache=None, engine=forging.url, max_new_tokens="8")
    result = run_here(RunConfig.from_options(values))
    cells = {c.id: c for c in result.report.cells}
    assert cells["bs4-beam1"].verdict == "untested", cells["bs4-beam1"].message
    assert "usage.completion_tokens 1000000 for one answer, above its max_tokens 8" in (
        cells["bs4-beam1"].notice or ""
    )
