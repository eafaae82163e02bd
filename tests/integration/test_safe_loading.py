"""Safe loading (issue #7 item 4): no pickle, no model code unless asked, no path from data.

Each "evil" file here would leave a marker file behind if anything ran it; the tests assert
that the marker never appears.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.config import DatasetOptions, DecodingSettings, EngineOptions, RunConfig
from harness.engines.base import EngineInfo, Generation
from harness.engines.emulator.build import BUNDLED_MODEL
from harness.errors import EngineError
from tests.integration.common import run_here

PACKAGE = Path(__file__).resolve().parents[2] / "harness"


def _pickle_that_touches(marker: Path) -> bytes:
    """A protocol-0 pickle whose loading runs ``os.system('touch MARKER')``."""
    return b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."


def _model_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(BUNDLED_MODEL, folder)
    return folder


def test_hf_model_with_only_pickle_weights_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from harness.engines.hf import HFEngine

    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    folder = _model_copy(tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(_pickle_that_touches(tmp_path / "unpickled"))
    with pytest.raises(
        EngineError,
        match=r"model: no \*\.safetensors weights; the hf backend "
        r"loads safetensors only",
    ):
        HFEngine(folder)
    assert not (tmp_path / "unpickled").exists()


def test_hf_model_with_both_formats_loads_safetensors_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from harness.engines.hf import HFEngine

    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    folder = _model_copy(tmp_path)
    (folder / "pytorch_model.bin").write_bytes(_pickle_that_touches(tmp_path / "unpickled"))
    engine = HFEngine(folder, device="cpu")
    assert engine.info.identity.startswith("sha256:")
    assert not (tmp_path / "unpickled").exists()


def _with_remote_code(folder: Path, marker: Path) -> Path:
    """Point the tokenizer (and the model) at code shipped in the folder."""
    (folder / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "class EvilTokenizer(PreTrainedTokenizerFast):\n    pass\n"
    )
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(
        tokenizer_class="EvilTokenizer",
        auto_map={"AutoTokenizer": ["evil.EvilTokenizer", "evil.EvilTokenizer"]},
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    model = json.loads((folder / "config.json").read_text())
    model["auto_map"] = {"AutoModelForCausalLM": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(model))
    return folder


@pytest.mark.parametrize("loader", ["hf", "tokenizer"])
def test_model_code_never_runs_without_trust_remote_code(tmp_path: Path, loader: str) -> None:
    """A folder whose tokenizer and model point at shipped code: the harness loads it with the
    built-in classes or refuses it, and the shipped code never runs."""
    from harness.engines.hf import HFEngine
    from harness.engines.tokenizer import load_tokenizer

    marker = tmp_path / "ran"
    folder = _with_remote_code(_model_copy(tmp_path), marker)
    try:
        if loader == "hf":
            HFEngine(folder, device="cpu")  # the hf backend never runs model code
        else:
            load_tokenizer(folder, EngineOptions(), backend="trtllm")  # trtllm, llmapi: only when asked
    except EngineError as exc:
        assert "custom code" in str(exc) or "--trust-remote-code" in str(exc)
    assert not marker.exists()
    assert (
        RunConfig().engine_options.trust_remote_code is False and EngineOptions().trust_remote_code is False
    )


def test_tokenizer_that_needs_its_code_is_refused_with_the_flag_named(tmp_path: Path) -> None:
    """Only tokenizer files (no model type to fall back on): refused, naming the option."""
    from harness.engines.tokenizer import load_tokenizer

    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BUNDLED_MODEL / name, folder / name)
    (folder / "config.json").write_text("{}")
    marker = tmp_path / "ran"
    _with_remote_code(folder, marker)
    with pytest.raises(EngineError, match=r"cannot load the tokenizer .*add --trust-remote-code"):
        load_tokenizer(folder, EngineOptions(), backend="trtllm")
    assert not marker.exists()


def test_package_source_loads_nothing_unsafely() -> None:
    """No pickle, no torch.load, no eval/exec, remote code only from the option."""
    bad = re.compile(
        r"\bimport pickle\b|\bpickle\.|torch\.load\(|weights_only\s*=\s*False|"
        r"trust_remote_code\s*=\s*True|(?<![\w.])eval\(|(?<![\w.])exec\(|"
        r"\bdill\b|\bjoblib\b|yaml\.load\(|allow_pickle\s*=\s*True"
    )
    found = [
        f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
        for p in PACKAGE.rglob("*.py")
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if bad.search(line)
    ]
    assert not found, found
    remote = [
        f"{p.name}: {line.strip()}"
        for p in PACKAGE.rglob("*.py")
        for line in p.read_text(encoding="utf-8").splitlines()
        if "trust_remote_code=" in line and "trust_remote_code=False" not in line
    ]
    # every other trust_remote_code= passes the --trust-remote-code option through
    assert all("options.trust_remote_code" in r or "self.trust_remote_code" in r for r in remote), remote


HOSTILE_IDS = [
    "../../etc/passwd",
    "/etc/passwd",
    "..",
    "a/../../b",
    "C:\\Windows\\x",
    "~/.ssh/id_rsa",
    "x" * 300,
    "nul\x00byte",
    "ok",
]


class EchoWithHostileBackend:
    """An engine whose backend label and identity hold path tricks."""

    def __init__(self) -> None:
        self.info = EngineInfo(
            backend="../../../escape", path="/tmp/../../escape", identity="../../../../etc/passwd"
        )

    def generate(self, prompts: Sequence[str], settings: DecodingSettings) -> list[Generation]:
        return [Generation(text=" ".join(p.split()[:10])) for p in prompts]


def test_ids_and_names_from_data_never_become_paths(tmp_path: Path) -> None:
    data = tmp_path / "data" / "..%2F..%2Fhostile.jsonl"
    data.parent.mkdir()
    data.write_text(
        "".join(
            json.dumps({"id": i, "text": f"document {n} " + "word " * 20, "summary": "word word"}) + "\n"
            for n, i in enumerate(HOSTILE_IDS)
        ),
        encoding="utf-8",
    )
    roots = {name: tmp_path / "inside" / name for name in ("reports", "goldens", "cache")}
    before = {p for p in tmp_path.parent.rglob("*")}
    config = RunConfig(
        data=DatasetOptions(dataset=str(data)),
        batch_sizes=(1, 2),
        beam_widths=(1,),
        update_goldens=True,
        report_dir=roots["reports"],
        goldens_dir=roots["goldens"],
        cache_dir=roots["cache"],
    )
    result = run_here(config, engine=EchoWithHostileBackend())
    assert result.report.verdict == "pass"
    created = {p for p in tmp_path.parent.rglob("*")} - before
    inside = tmp_path / "inside"
    assert created and all(p == inside or inside in p.parents for p in created), sorted(created)
    assert result.folder.parent == roots["reports"]
    [golden] = roots["goldens"].glob("*/*.json")
    assert set(json.loads(golden.read_text())["outputs"]) == set(HOSTILE_IDS)  # ids kept as data
    rows = [json.loads(line) for line in (result.folder / "generations.jsonl").read_text().splitlines()]
    assert {r["id"] for r in rows} == set(HOSTILE_IDS)
