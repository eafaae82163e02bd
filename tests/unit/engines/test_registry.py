from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.engines.registry import detect_backend, load_engine, peek_config, resolve_backend
from harness.errors import EngineError


def test_detects_emulator_and_hf(engine_factory: Callable[[int, int], Path]) -> None:
    from harness.engines.emulator.build import BUNDLED_MODEL

    assert detect_backend(engine_factory(8, 4)) == "emulator"
    assert detect_backend(BUNDLED_MODEL) == "hf"
    config = peek_config(str(engine_factory(8, 4)))
    assert isinstance(config, dict) and isinstance(build := config["build_config"], dict)
    assert build["max_beam_width"] == 4


def test_tensorrt_llm_engine_dir_is_the_trtllm_backend(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"version": "0.13.0", "pretrained_config": {}, "build_config": {}})
    )
    assert detect_backend(tmp_path) == "trtllm"
    from harness.engines.llmapi import LlmApiEngine
    from harness.engines.trtllm import TrtllmEngine

    assert resolve_backend("trtllm") is TrtllmEngine
    assert resolve_backend("llmapi") is LlmApiEngine


def test_unknown_backend_suggests() -> None:
    with pytest.raises(EngineError, match="did you mean 'hf'"):
        resolve_backend("hff")


def test_user_class_without_generate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "nogen.py").write_text("class E:\n    def __init__(self, path): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EngineError, match="no generate"):
        load_engine("nogen:E")
    with pytest.raises(EngineError, match="has no 'Missing'"):
        load_engine("nogen:Missing")


def test_emulator_engine_missing_weights(engine_factory: Callable[[int, int], Path], tmp_path: Path) -> None:
    broken = tmp_path / "e"
    shutil.copytree(engine_factory(8, 4), broken)
    (broken / "rank0.safetensors").unlink()
    with pytest.raises(EngineError, match="rank0.safetensors: engine weights missing"):
        load_engine(str(broken))
    cfg = json.loads((broken / "config.json").read_text())
    cfg["build_config"]["max_beam_width"] = "four"
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EngineError, match="max_beam_width must be a positive integer"):
        load_engine(str(broken))


def test_build_engine_cli_writes_unified_config(tmp_path: Path) -> None:
    from harness.__main__ import main

    assert (
        main(
            [
                "build-engine",
                "--output",
                str(tmp_path / "e"),
                "--max-batch-size",
                "4",
                "--max-beam-width",
                "2",
            ]
        )
        == 0
    )
    cfg = json.loads((tmp_path / "e" / "config.json").read_text())
    assert set(cfg) >= {"version", "pretrained_config", "build_config", "emulator"}
    assert cfg["build_config"]["max_batch_size"] == 4 and cfg["build_config"]["max_beam_width"] == 2
    assert cfg["pretrained_config"]["num_key_value_heads"] < cfg["pretrained_config"]["num_attention_heads"]
    assert (
        main(
            [
                "build-engine",
                "--output",
                str(tmp_path / "x"),
                "--max-seq-len",
                "100",
                "--max-input-len",
                "200",
            ]
        )
        == 2
    )


def test_build_engine_never_replaces_what_it_did_not_build(tmp_path: Path) -> None:
    from harness.engines.emulator.build import BUNDLED_MODEL, build_engine, build_limits

    model = tmp_path / "model"
    shutil.copytree(BUNDLED_MODEL, model)
    (model / "notes.txt").write_text("mine")
    with pytest.raises(EngineError, match="not an emulator engine directory"):
        build_engine(model, build_limits(), model_dir=model)
    assert (model / "model.safetensors").is_file() and (model / "notes.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(EngineError, match="is a file"):
        build_engine(tmp_path / "file", build_limits())
    built = build_engine(tmp_path / "e", build_limits(max_beam_width=1))
    assert build_engine(built, build_limits(max_beam_width=4)) == built  # a rebuild replaces it
    assert json.loads((built / "config.json").read_text())["build_config"]["max_beam_width"] == 4


ENGINE_MODULE = """
from harness.engines.base import Generation


class Echo:
    def __init__(self, path):
        self.path = path

    def generate(self, prompts, settings):
        return [Generation(text=p[:20]) for p in prompts]
"""


def test_a_users_engine_module_in_the_rootdir_or_current_folder_needs_no_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--engine mymodule:MyClass finds mymodule.py in pytest's rootdir or the current folder,
    as pytest users expect, without PYTHONPATH."""
    import sys

    from harness.engines.registry import load_engine

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "user_engine_rootdir.py").write_text(ENGINE_MODULE)
    (elsewhere / "user_engine_cwd.py").write_text(ENGINE_MODULE)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(elsewhere)
    for name in ("user_engine_rootdir", "user_engine_cwd"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    engine = load_engine("user_engine_rootdir:Echo", roots=(project,))
    assert engine.info.backend == "user_engine_rootdir:Echo"
    assert load_engine("user_engine_cwd:Echo").info.backend == "user_engine_cwd:Echo"
    with pytest.raises(EngineError, match="neither on sys.path nor in .*add that folder to PYTHONPATH"):
        load_engine("no_such_user_module:Echo", roots=(project,))


def test_a_module_that_lacks_what_it_imports_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from harness.engines.registry import load_engine

    (tmp_path / "user_engine_broken.py").write_text("import no_such_dependency_here\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "user_engine_broken", raising=False)
    with pytest.raises(EngineError, match="No module named 'no_such_dependency_here'") as caught:
        load_engine("user_engine_broken:Echo")
    assert "PYTHONPATH" not in str(caught.value)
