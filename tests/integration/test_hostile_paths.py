"""Issue 24, class 1: nothing the harness writes, renames, deletes or locks resolves outside
its own folders, whatever links a pull request (goldens are committed) or another user (a
shared cache) planted inside them. The folder an option names is the user's and may itself
be a link; a link below it is refused in one line naming it, and nothing is written,
renamed, truncated or removed through it. Class 5: two datasets whose names an older harness
turned into one file name keep separate goldens."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.errors import StorageError
from tests.conftest import SuitesRun, only_report
from tests.integration.common import Suites, grid_options

HERE = Path(__file__).resolve().parent
TOY = {"TOY_BROKEN_FROM": "-1"}
TEMP = ".news-beam1.json.abcdefgh"  # named like a temporary file of a goldens update


def _common(data: Path, goldens: Path, reports: Path) -> list[str]:
    return [
        "--engine",
        "toy_engine:ToyEngine",
        *grid_options(data, "1,2", "1"),
        "--goldens-dir",
        str(goldens),
        "--report-dir",
        str(reports),
    ]


def _news(small_dataset: Path, folder: Path, name: str = "news.jsonl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / name
    data.write_text(small_dataset.read_text(encoding="utf-8"), encoding="utf-8")
    return data


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _refusal(call: Callable[[], Any]) -> str:
    """The one line ``call`` was refused with ("" when it went ahead)."""
    try:
        call()
    except StorageError as exc:
        return str(exc)
    return ""


def _refused(proc: SuitesRun, link: Path) -> None:
    assert proc.returncode == 4, proc.stdout[-2000:]
    err = proc.stdout + proc.stderr
    assert f"{link}: a symbolic link (to " in err and "replace the link with a real folder" in err
    assert "Traceback" not in err


def test_a_plain_run_deletes_nothing_through_a_linked_identity_folder(
    tmp_path: Path, small_dataset: Path, suites: Suites
) -> None:
    """The clean-up of temporary files went through ``goldens/*/.*`` and followed the link."""
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (victim / TEMP).write_text("not the harness's file")
    goldens = tmp_path / "goldens"
    goldens.mkdir()
    (goldens / "sha256-0123456789abcdef").symlink_to(victim, target_is_directory=True)
    data = _news(small_dataset, tmp_path / "data")
    proc = suites(*_common(data, goldens, tmp_path / "r"), env=TOY, path=[HERE])
    assert (victim / TEMP).read_text() == "not the harness's file"
    _refused(proc, goldens / "sha256-0123456789abcdef")


def test_update_goldens_writes_nothing_through_a_linked_identity_folder(
    tmp_path: Path, small_dataset: Path, suites: Suites
) -> None:
    data = _news(small_dataset, tmp_path / "data")
    goldens = tmp_path / "goldens"
    rec = suites(*_common(data, goldens, tmp_path / "r1"), "--update-goldens", env=TOY, path=[HERE])
    assert rec.returncode == 0, rec.stdout[-2000:]
    [identity] = [p for p in goldens.iterdir() if p.is_dir()]
    victim = tmp_path / "elsewhere"
    identity.rename(victim)  # the folder now lies outside; a link to it takes its place
    identity.symlink_to(victim, target_is_directory=True)
    before = _files(victim)

    upd = suites(
        *_common(data, goldens, tmp_path / "r2"),
        "--update-goldens",
        "--max-new-tokens",
        "24",
        env=TOY,
        path=[HERE],
    )
    assert _files(victim) == before  # nothing written, renamed or left behind there
    _refused(upd, identity)
    assert not (tmp_path / "r2").exists() or not list((tmp_path / "r2").glob("*/report.json"))

    use = suites(*_common(data, goldens, tmp_path / "r3"), env=TOY, path=[HERE])
    _refused(use, identity)  # goldens are read from inside the folder only
    assert _files(victim) == before


def test_a_linked_lock_file_keeps_its_target(tmp_path: Path, small_dataset: Path, suites: Suites) -> None:
    """The lock was opened without O_NOFOLLOW and truncated to the pid."""
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    goldens = tmp_path / "goldens"
    goldens.mkdir()
    (goldens / ".lock").symlink_to(precious)
    data = _news(small_dataset, tmp_path / "data")
    proc = suites(*_common(data, goldens, tmp_path / "r"), "--update-goldens", env=TOY, path=[HERE])
    assert precious.read_text() == "keep me\n"
    _refused(proc, goldens / ".lock")
    assert [p.name for p in goldens.iterdir()] == [".lock"]  # and no goldens written


def test_the_goldens_store_locks_nothing_through_a_link(tmp_path: Path) -> None:
    from harness.storage.goldens import JOURNAL_FILE, GoldensStore

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    root = tmp_path / "goldens"
    root.mkdir()
    (root / ".lock").symlink_to(precious)
    (root / "x").mkdir()
    (root / "x" / TEMP).write_text("stray")  # a stray makes recover() take the lock
    refused = _refusal(GoldensStore(root).recover)
    assert precious.read_text() == "keep me\n"
    assert ".lock: a symbolic link" in refused
    (root / ".lock").unlink()
    (root / JOURNAL_FILE).symlink_to(precious)  # a journal link is neither read as ours nor removed
    refused = _refusal(GoldensStore(root).recover)
    assert precious.read_text() == "keep me\n" and (root / JOURNAL_FILE).is_symlink()
    assert ".commit.json: a symbolic link" in refused


def test_a_link_inside_the_cache_stops_the_cache_not_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another user's link in a shared cache: the lock's target kept its content (it was
    truncated to the pid), a batch was not written into the linked folder."""
    from harness.config import DecodingSettings
    from harness.storage.cache import LOCK_FILE, GenerationCache

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "cache"
    folder = root / ("f" * 24)
    folder.mkdir(parents=True)
    (folder / LOCK_FILE).symlink_to(precious)
    cache = GenerationCache(root, "f" * 64)
    assert precious.read_text() == "keep me\n"
    assert not cache.stats.enabled and "a symbolic link" in cache.stats.reason
    assert "warning: generation cache:" in capsys.readouterr().err

    (folder / LOCK_FILE).unlink()
    cache = GenerationCache(root, "f" * 64)
    assert cache.stats.enabled
    settings = DecodingSettings(1, 8)
    path = cache._path(cache._key(settings, ["p"]))
    path.parent.symlink_to(elsewhere, target_is_directory=True)  # planted after the start
    cache.put(settings, ["p"], ["out"])
    assert list(elsewhere.iterdir()) == [] and not cache.writable
    assert cache.get(settings, ["p"]) is None and cache.stats.batches_generated == 1
    assert capsys.readouterr().err.count("warning: generation cache:") == 1


def test_generations_jsonl_is_never_appended_through_a_link(tmp_path: Path) -> None:
    """The run folder is new, but a link planted in it before the log opens was appended to."""
    from harness.storage.generations import CellTexts, GenerationsLog

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    run_folder = tmp_path / "reports" / "run-1"
    run_folder.mkdir(parents=True)
    (run_folder / "generations.jsonl").symlink_to(precious)

    def log_a_cell() -> None:
        log = GenerationsLog(run_folder / "generations.jsonl", ["d0"])
        log.add("bs1-beam1", CellTexts(held=(("an output",),)))
        log.close()

    refused = _refusal(log_a_cell)
    assert precious.read_text() == "keep me\n"
    assert "generations.jsonl: a symbolic link" in refused


def test_report_files_are_never_written_through_a_linked_folder(tmp_path: Path) -> None:
    """A merge --output or run folder is checked from the folder down, the file's folder too."""
    from harness.storage.atomic import atomic_write_text

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "merged"
    root.mkdir()
    (root / "sub").symlink_to(elsewhere, target_is_directory=True)
    refused = _refusal(lambda: atomic_write_text(root / "sub" / "report.md", "x", root=root))
    assert list(elsewhere.iterdir()) == []
    assert "sub: a symbolic link" in refused


def test_folders_the_user_names_may_be_links(tmp_path: Path, small_dataset: Path, suites: Suites) -> None:
    """--report-dir and --goldens-dir themselves are the user's choice: a link there is
    followed (only what lies below them must be real)."""
    real_reports, real_goldens = tmp_path / "real-reports", tmp_path / "real-goldens"
    real_reports.mkdir()
    real_goldens.mkdir()
    (tmp_path / "reports").symlink_to(real_reports, target_is_directory=True)
    (tmp_path / "goldens").symlink_to(real_goldens, target_is_directory=True)
    data = _news(small_dataset, tmp_path / "data")
    proc = suites(
        *_common(data, tmp_path / "goldens", tmp_path / "reports"), "--update-goldens", env=TOY, path=[HERE]
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert only_report(real_reports)["verdict"] and list(real_goldens.rglob("news-beam1.json"))


def test_datasets_whose_names_shared_a_file_keep_separate_goldens(
    tmp_path: Path, small_dataset: Path, suites: Suites
) -> None:
    """`news a.jsonl` and `news-a.jsonl` were both stored as news-a-beam1.json: recording the
    second replaced the first's goldens, whose next run then failed blaming a changed dataset."""
    spaced = _news(small_dataset, tmp_path / "data", "news a.jsonl")
    dashed = _news(small_dataset, tmp_path / "data", "news-a.jsonl")
    lines = dashed.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[0])
    row["text"] = "Another dataset entirely. " + row["text"]
    dashed.write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n", encoding="utf-8")
    goldens = tmp_path / "goldens"
    for i, data in enumerate((spaced, dashed)):
        rec = suites(*_common(data, goldens, tmp_path / f"rec{i}"), "--update-goldens", env=TOY, path=[HERE])
        assert rec.returncode == 0, rec.stdout[-2000:]
    files = sorted(p.name for p in goldens.rglob("*.json"))
    assert len(files) == 2 and "news-a-beam1.json" in files, files
    for i, data in enumerate((spaced, dashed)):
        use = suites(*_common(data, goldens, tmp_path / f"use{i}"), env=TOY, path=[HERE])
        assert use.returncode == 0, (use.stdout + use.stderr)[-2000:]
        assert only_report(tmp_path / f"use{i}")["baseline"]["1"].startswith("goldens ")
