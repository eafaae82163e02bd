"""The generation cache: a rerun asks the engine only for what is missing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.config import RunConfig
from harness.pipeline import RunOutcome, run
from tests.integration.common import run_options
from tests.integration.toy_engine import ToyEngine


def _run(engine: str | None, dataset: Path, tmp: Path, name: str, **options: str | bool) -> RunConfig:
    """A run over the grid 1,2 x 1 (``engine`` None: one given to run()), its report in tmp /
    ``name``, the goldens and the cache shared by every run under ``tmp``."""
    values = run_options(tmp, dataset, "1,2", report=name, goldens="g", max_new_tokens="16", looks=1)
    return RunConfig.from_options({**values, **options, "engine": engine})


def _numbers(result: RunOutcome) -> list[list[float]]:
    report = json.loads((result.folder / "report.json").read_text())
    return [[p["agreement"] for p in c["positions"]] for c in report["cells"]]


def test_rerun_comes_from_the_cache_with_identical_numbers(
    tmp_path: Path, engine_factory: Callable[[int, int], Path], small_dataset: Path
) -> None:
    engine = str(engine_factory(8, 4))
    first = run(_run(engine, small_dataset, tmp_path, "r1"))
    assert isinstance(first, RunOutcome) and first.report.cache is not None
    assert first.report.cache.enabled and first.report.cache.batches_generated == 32  # 16 x bs1 + 16 x bs2
    assert first.report.cache.generations_from_cache == 0
    second = run(_run(engine, small_dataset, tmp_path, "r2", tolerance="0.05"))
    assert isinstance(second, RunOutcome) and second.report.cache is not None
    assert second.report.cache.batches_generated == 0  # the engine was not called
    assert second.report.cache.generations_from_cache == 16 + 32
    assert _numbers(first) == _numbers(second)
    assert "48 generations from the cache" in (second.folder / "report.md").read_text()

    assert first.report.cache.folder is not None
    entries = sorted(Path(first.report.cache.folder).rglob("*.json"))
    entries[0].write_text("{truncated")  # a damaged entry is generated again, and rewritten
    third = run(_run(engine, small_dataset, tmp_path, "r3"))
    assert isinstance(third, RunOutcome) and third.report.cache is not None
    assert third.report.cache.batches_generated == 1 and _numbers(third) == _numbers(first)
    assert json.loads(entries[0].read_text())["outputs"]

    off = run(_run(engine, small_dataset, tmp_path, "r4", no_cache=True))
    assert isinstance(off, RunOutcome) and off.report.cache is not None
    assert not off.report.cache.enabled and off.report.cache.batches_generated == 32
    assert off.report.cache.reason == "off (--no-cache)"


def test_engines_without_a_directory_are_not_cached(tmp_path: Path, small_dataset: Path) -> None:
    # run() adopts any object with generate(); harness annotates it Engine (the full protocol)
    result = run(
        _run(None, small_dataset, tmp_path, "r"),
        engine=ToyEngine(None, broken_from=-1),
    )
    assert isinstance(result, RunOutcome) and result.report.cache is not None
    assert not result.report.cache.enabled and "no directory" in result.report.cache.reason


def test_a_cache_that_cannot_be_written_stops_caching_not_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.config import DecodingSettings
    from harness.storage.cache import GenerationCache

    cache = GenerationCache(tmp_path, "f" * 64)
    assert cache.folder is not None
    cache.folder.parent.mkdir(parents=True, exist_ok=True)
    cache.folder.write_text("a file where the folder should be")  # root ignores chmod; this stops anyone
    settings = DecodingSettings(1, 8)
    cache.put(settings, ["p"], ["out"])
    cache.put(settings, ["q"], ["out"])
    assert cache.stats.batches_generated == 2 and not cache.writable
    assert "writing stopped (File exists)" in cache.stats.reason
    assert capsys.readouterr().err.count("cannot write (File exists)") == 1


def test_temporaries_of_killed_runs_are_removed_unless_a_run_is_writing(tmp_path: Path) -> None:
    from harness.storage.cache import LOCK_FILE, GenerationCache
    from harness.storage.locks import file_lock

    folder = tmp_path / ("f" * 24) / "ab"
    folder.mkdir(parents=True)
    stray = folder / ".abc.json.k2j4h5g6"
    stray.write_text('{"outputs": ["half')
    kept = folder / "abc.json"
    kept.write_text('{"outputs": []}')
    with file_lock(tmp_path / ("f" * 24) / LOCK_FILE, purpose="test", shared=True):
        GenerationCache(tmp_path, "f" * 64)  # another run is writing: leave its files alone
    assert stray.exists()
    GenerationCache(tmp_path, "f" * 64)
    assert not stray.exists() and kept.exists()


def test_request_fields_are_part_of_the_cache_key(tmp_path: Path) -> None:
    """A batch generated with --request-field repeat_penalty=1.0 is not the one without it."""
    from harness.config import DecodingSettings
    from harness.storage.cache import GenerationCache

    cache = GenerationCache(tmp_path, "f" * 64)
    plain = DecodingSettings(1, 8)
    rp1 = DecodingSettings(1, 8, request_fields=(("repeat_penalty", "1.0"),))
    cache.put(rp1, ["p"], ["with the field"])
    assert cache.get(rp1, ["p"]) == ["with the field"]
    assert cache.get(plain, ["p"]) is None
