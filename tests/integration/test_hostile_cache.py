"""Issue 24 class 3: the generation cache serves only outputs of this engine's code.

A `--backend module:Class --engine DIR` engine was keyed by its label and its folder, not by
its code: changed plug-in code got every output of the old code from the cache, two plug-ins
of one label sharing a cache mixed each other's outputs, and an entry edited by hand (valid
JSON) was used silently. Each test runs a small engine module written into tmp_path.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import pytest

from harness.config import RunConfig
from harness.pipeline import RunOutcome
from tests.integration.common import run_here, run_options

MODULE = "hostile_cache_engine"
Plug: TypeAlias = Callable[[Path], None]  # the plug fixture: use(folder)
ENGINE = """
from harness.engines.base import Generation

WORD = {word!r}


class Engine:
    def __init__(self, path):
        self.path = path

    def generate(self, prompts, settings):
        return [Generation(text=WORD + " " + " ".join(p.split()[:6])) for p in prompts]
"""


def _write_engine(folder: Path, word: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{MODULE}.py").write_text(ENGINE.format(word=word), encoding="utf-8")
    return folder


@pytest.fixture
def plug(monkeypatch: pytest.MonkeyPatch) -> Iterator[Plug]:
    """use(folder): import the engine module from ``folder`` afresh, as a new process would."""

    def use(folder: Path) -> None:
        monkeypatch.delitem(sys.modules, MODULE, raising=False)
        monkeypatch.delitem(sys.modules, HELPER, raising=False)
        monkeypatch.setattr(
            sys, "path", [str(folder), *[p for p in sys.path if not p.startswith(str(folder.parent))]]
        )
        monkeypatch.setattr(sys, "dont_write_bytecode", True)  # never a stale .pyc
        importlib.invalidate_caches()

    yield use
    sys.modules.pop(MODULE, None)
    sys.modules.pop(HELPER, None)


HELPER = "hostile_cache_helper"
WITH_HELPER = """
from harness.engines.base import Generation
from hostile_cache_helper import words


class Engine:
    def __init__(self, path):
        self.path = path

    def generate(self, prompts, settings):
        return [Generation(text=words(p)) for p in prompts]
"""


def _options(tmp: Path, name: str, weights: Path, dataset: Path) -> dict[str, object]:
    """A run of the engine in ``weights`` over the grid 1,2 x 1, its report in tmp / ``name``,
    the goldens and the cache shared by every run under ``tmp``."""
    return run_options(tmp, dataset, "1,2", report=name, engine=str(weights), max_new_tokens="16", looks=1)


@dataclass(frozen=True)
class Runs:
    """The runs fixture: ``run(folder, name)`` runs the engine module written in ``folder``
    (imported afresh by ``plug``), on the same weights folder and dataset every time."""

    tmp: Path
    weights: Path
    dataset: Path
    plug: Plug

    def run(self, code: Path, name: str) -> RunOutcome:
        self.plug(code)
        options = _options(self.tmp, name, self.weights, self.dataset)
        return run_here(RunConfig.from_options({**options, "backend": f"{MODULE}:Engine"}))


@pytest.fixture
def runs(tmp_path: Path, small_dataset: Path, weights: Path, plug: Plug) -> Runs:
    return Runs(tmp_path, weights, small_dataset, plug)


def test_changed_code_in_a_module_the_plugin_imports_is_generated_again(tmp_path: Path, runs: Runs) -> None:
    """The plug-in's own file is unchanged; the helper module beside it, which decides the
    outputs, changes."""
    code = tmp_path / "plugin"
    code.mkdir()
    (code / f"{MODULE}.py").write_text(WITH_HELPER, encoding="utf-8")
    helper = code / f"{HELPER}.py"
    helper.write_text("def words(p):\n    return 'one ' + p.split()[0]\n", encoding="utf-8")
    first = runs.run(code, "r1")
    helper.write_text("def words(p):\n    return 'three ' + p.split()[1]\n", encoding="utf-8")
    second = runs.run(code, "r2")
    assert first.report.cache.batches_generated == 32 and second.report.cache.generations_from_cache == 0
    assert all(o.startswith("three ") for o in _outputs(second))


def _outputs(result: RunOutcome) -> list[str]:
    lines = (result.folder / "generations.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["output"] for line in lines]


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"same weights")
    return folder


def test_changed_plugin_code_is_generated_again(tmp_path: Path, runs: Runs) -> None:
    code = _write_engine(tmp_path / "plugin", "alpha")
    first = runs.run(code, "r1")
    assert first.report.cache.enabled and first.report.cache.batches_generated == 32
    assert all(o.startswith("alpha ") for o in _outputs(first))

    _write_engine(code, "beta-version")  # the plug-in's code changes, nothing else does
    second = runs.run(code, "r2")
    assert second.report.cache.generations_from_cache == 0, second.report.cache
    assert second.report.cache.batches_generated == 32
    assert all(o.startswith("beta-version ") for o in _outputs(second))

    third = runs.run(code, "r3")  # the same code again: now it is the cache's
    assert third.report.cache.batches_generated == 0 and third.report.cache.generations_from_cache == 48
    assert _outputs(third) == _outputs(second)


def test_two_plugins_of_one_label_sharing_a_cache_do_not_mix(tmp_path: Path, runs: Runs) -> None:
    """Two checkouts of the same module:Class (a team's build and a colleague's), one cache."""
    ours = _write_engine(tmp_path / "ours", "ours")
    theirs = _write_engine(tmp_path / "theirs", "theirs-too")
    a = runs.run(ours, "a")
    b = runs.run(theirs, "b")
    again = runs.run(ours, "a2")
    assert b.report.cache.generations_from_cache == 0
    assert all(o.startswith("ours ") for o in _outputs(a) + _outputs(again))
    assert all(o.startswith("theirs-too ") for o in _outputs(b))
    assert again.report.cache.generations_from_cache == 48  # its own entries, still there
    assert a.report.cache.folder != b.report.cache.folder


def test_an_entry_edited_by_hand_is_not_used(tmp_path: Path, runs: Runs) -> None:
    code = _write_engine(tmp_path / "plugin", "honest")
    first = runs.run(code, "r1")
    assert first.report.cache.folder is not None  # the cache is on
    entries = sorted(Path(first.report.cache.folder).rglob("*.json"))
    assert len(entries) == 32
    for entry in entries[:5]:  # valid JSON, the outputs changed
        data = json.loads(entry.read_text(encoding="utf-8"))
        data["outputs"] = ["forged " + t for t in data["outputs"]]
        entry.write_text(json.dumps(data), encoding="utf-8")
    # an intact entry of another batch, copied over a third one: not this batch's
    entries[5].write_text(entries[6].read_text(encoding="utf-8"), encoding="utf-8")
    second = runs.run(code, "r2")
    assert not any(o.startswith("forged") for o in _outputs(second))
    assert _outputs(second) == _outputs(first)
    assert second.report.cache.batches_generated == 6 and second.report.cache.batches_rejected == 6
    assert "6 entries rejected" in second.report.cache.reason
    report = (second.folder / "report.md").read_text(encoding="utf-8")
    assert "6 entries rejected" in report
    # rewritten on the way: a third run takes every batch from the cache
    third = runs.run(code, "r3")
    assert third.report.cache.batches_generated == 0 and third.report.cache.batches_rejected == 0


def test_an_engine_class_without_source_is_not_cached(
    tmp_path: Path, small_dataset: Path, weights: Path
) -> None:
    """Code that cannot be read cannot key the cache: such an engine is generated every time."""
    import types

    from harness.storage.cache_key import engine_code

    module = types.ModuleType("hostile_cache_no_source")  # made in memory, no file behind it
    exec(ENGINE.format(word="unread"), module.__dict__)
    module.Engine.__module__ = module.__name__
    assert engine_code(type(module.Engine(None))) is None
    config = RunConfig.from_options(_options(tmp_path, "r", weights, small_dataset))
    sys.modules[module.__name__] = module
    try:
        from harness.engines.base import EngineInfo

        engine = module.Engine(None)
        engine.info = EngineInfo(backend="in-memory", path=str(weights), identity="in-memory")
        result = run_here(config, engine=engine)
    finally:
        del sys.modules[module.__name__]
    assert not result.report.cache.enabled and "no source file" in result.report.cache.reason
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.json"))
