"""Issue 15, class 5: a full disk is one line naming the folder, and what was complete before
it is kept: while generations.jsonl streams, while --update-goldens writes, under
``compare --html`` and ``merge --output``. The disk fills up by a write raising
OSError(ENOSPC), as the kernel's would."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import IO, Any

import pytest

from harness.__main__ import main
from harness.storage import atomic, generations
from tests.integration.common import echo_options

HERE = Path(__file__).resolve().parent
ENOSPC = OSError(errno.ENOSPC, "No space left on device")


class FillingFile:
    """A binary file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, file: IO[bytes], room: int) -> None:
        self.file, self.room = file, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


def fill_generations(monkeypatch: pytest.MonkeyPatch, room: int) -> None:
    """generations.jsonl, opened to append, takes ``room`` bytes, then the disk is full."""
    real_open = open

    def filling_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        file = real_open(path, mode, *args, **kwargs)
        return FillingFile(file, room) if "a" in mode else file

    monkeypatch.setattr(generations, "open", filling_open, raising=False)


def _no_space(*args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _run_args(tmp: Path, dataset: Path, *extra: str) -> list[str]:
    return ["run", *echo_options(tmp, dataset, "1,2,4"), *extra]


def _one_line(err: str) -> str:
    """The one error line on stderr, beside the progress lines a log gets."""
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("progress: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_full_disk_while_generations_stream(
    tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    fill_generations(monkeypatch, len((small_dataset).read_bytes()) // 4)  # room for about one cell's rows
    # the fixed design streams each cell as it completes (a sequential run writes a cell once it stops)
    code, out, err = _cli(capsys, *_run_args(tmp_path, small_dataset, "--looks", "1"))
    line = _one_line(err)
    assert code == 2
    assert "generations.jsonl: cannot write (No space left on device)" in line
    assert "the 1 cells completed before are kept in it" in line and "generation cache" in line
    [log] = (tmp_path / "reports").glob("*/generations.jsonl")
    rows = [json.loads(r) for r in log.read_text().splitlines() if r.strip()]
    assert {r["cell"] for r in rows} == {"bs1-beam1"} and len(rows) == 16  # the complete cell
    assert not list((tmp_path / "reports").glob("*/report.json"))

    monkeypatch.undo()  # space again: the rerun reads what was generated from the cache
    monkeypatch.syspath_prepend(str(HERE))
    code, out, err = _cli(capsys, *_run_args(tmp_path, small_dataset))
    assert code == 0, out + err
    cache = json.loads(sorted((tmp_path / "reports").glob("*/report.json"))[-1].read_text())["cache"]
    assert cache["generations_from_cache"] >= 16


def test_full_disk_while_goldens_are_written_keeps_the_report(
    tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    code, out, err = _cli(capsys, *_run_args(tmp_path, small_dataset, "--update-goldens"))
    assert code == 0, out + err
    before = {p: p.read_bytes() for p in (tmp_path / "goldens").rglob("*.json")}
    monkeypatch.setenv("FAULT_VARIANT", "changed")  # new outputs to record
    from harness.storage import goldens

    monkeypatch.setattr(goldens, "durable_temp", _no_space)
    code, out, err = _cli(capsys, *_run_args(tmp_path, small_dataset, "--update-goldens", "--no-cache"))
    line = _one_line(err)
    assert code == 2
    assert f"--goldens-dir {tmp_path / 'goldens'}: cannot write (No space left on device)" in line
    assert "left unchanged" in line and "the run's report was kept in" in line
    assert len(list((tmp_path / "reports").glob("*/report.json"))) == 2  # this run's is there
    after = {p: p.read_bytes() for p in (tmp_path / "goldens").rglob("*.json")}
    assert after == before  # the old goldens, byte for byte
    assert not [
        p for p in (tmp_path / "goldens").rglob(".*") if p.is_file() and p.name != ".lock"
    ]  # no temporary file left behind


@pytest.fixture
def one_report(
    tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    monkeypatch.syspath_prepend(str(HERE))
    code, out, err = _cli(capsys, *_run_args(tmp_path, small_dataset))
    assert code == 0, out + err
    [report] = (tmp_path / "reports").glob("*/report.json")
    return report.parent


def test_full_disk_under_compare_html(
    one_report: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "out" / "compare.html"
    monkeypatch.setattr(atomic, "durable_temp", _no_space)
    code, out, err = _cli(capsys, "compare", str(one_report), str(one_report), "--html", str(page))
    assert code == 2 and "no change beyond the tolerance" in out  # the comparison itself is there
    assert f"--html {page}: cannot write (No space left on device)" in _one_line(err)
    assert not page.exists()


def test_compare_html_pointing_at_a_folder(
    one_report: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "compare", str(one_report), str(one_report), "--html", str(tmp_path))
    assert code == 2 and f"--html {tmp_path}: is a folder; give a file name" in _one_line(err)


def test_full_disk_under_merge_output(
    tmp_path: Path, small_dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    shards = []
    for k in (1, 2):
        code, out, err = _cli(capsys, *_run_args(tmp_path, small_dataset, "--shard", f"{k}/2"))
        assert code == 0, out + err
        shards.append(sorted((tmp_path / "reports").glob("*/report.json"))[-1].parent)
    before = {p: p.read_bytes() for s in shards for p in s.iterdir()}
    monkeypatch.setattr(atomic, "durable_temp", _no_space)
    merged = tmp_path / "merged"
    code, out, err = _cli(capsys, "merge", *map(str, shards), "--output", str(merged))
    assert code == 2
    assert f"--output {merged}: cannot write (No space left on device)" in _one_line(err)
    assert {p: p.read_bytes() for s in shards for p in s.iterdir()} == before
    assert not (merged / "report.json").exists()
